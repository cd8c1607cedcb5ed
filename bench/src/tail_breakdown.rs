//! Where a request's time goes, request by request, from the system calls `bench/tail.sh` traces.
//!
//! - `tail-breakdown sockets PID`: prints `fd local_port remote_port` for each TCP socket the process holds,
//!   so a trace's file descriptors can be told apart and each connection matched with its peer's.
//! - `tail-breakdown LANE SERVER_PID SERVER_SOCKETS CLIENT_PID CLIENT_SOCKETS < TRACE`: reads `perf script -F
//!   comm,pid,tid,time,event,trace` of the syscall tracepoints (`recvfrom`, `sendto`, `writev`, `pwrite64`) of
//!   a load generator (the client) and the server it loads, follows every request from the client's send
//!   to its receipt of the answer, and prints one markdown section: each stage's p50, p90 and p99, and what
//!   each stage took on average in the slowest 1% of requests, which is what the tail is made of.
//!
//! A request's stages, each from the first system call that shows it: the client sends; the server reads it;
//! the server sends the upstream request (any server socket that is not a client connection is upstream,
//! matched to requests in the order they were read); the upstream's answer arrives; the store's log write
//! (`pwrite64` by the thread named `store-syncer`: the last one to end between the answer and the response)
//! starts and ends; the server writes the response; the client reads it.

#[path = "harness.rs"]
#[allow(dead_code)] // only `percentile` is used here
mod harness;

use std::collections::{HashMap, VecDeque};
use std::io::BufRead;

/// The thread that writes the store's log, as the kernel names it.
const LOG_THREAD: &str = "store-syncer";

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.as_slice() {
        [command, pid] if command == "sockets" => print!("{}", sockets(pid)),
        [lane, server, server_sockets, client, client_sockets] => {
            let read = |path: &str| std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{path}: {e}"));
            let (server_ports, client_ports) = (ports(&read(server_sockets)), ports(&read(client_sockets)));
            let pid = |pid: &str| pid.parse().unwrap_or_else(|_| panic!("`{pid}` is not a pid"));
            let mut requests = Requests::new(pid(server), &server_ports, pid(client), &client_ports);
            for line in std::io::stdin().lock().lines().map_while(Result::ok) {
                if let Some(call) = Call::parse(&line) {
                    requests.follow(call);
                }
            }
            print!("{}", report(lane, &requests.done));
        }
        _ => {
            eprintln!(
                "usage: tail-breakdown sockets PID | tail-breakdown LANE SERVER_PID SERVER_SOCKETS CLIENT_PID CLIENT_SOCKETS < TRACE"
            );
            std::process::exit(2);
        }
    }
}

/// `fd local_port remote_port` lines for the TCP sockets of process `pid`, from /proc.
fn sockets(pid: &str) -> String {
    let mut by_inode = HashMap::new();
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        for line in std::fs::read_to_string(table).unwrap_or_default().lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let port = |address: &str| address.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            if let (Some(local), Some(remote), Some(inode)) =
                (fields.get(1).and_then(|a| port(a)), fields.get(2).and_then(|a| port(a)), fields.get(9))
            {
                by_inode.insert(inode.to_string(), (local, remote));
            }
        }
    }
    let mut out = String::new();
    for entry in std::fs::read_dir(format!("/proc/{pid}/fd")).into_iter().flatten().flatten() {
        let link = std::fs::read_link(entry.path()).unwrap_or_default().display().to_string();
        let inode = link.strip_prefix("socket:[").and_then(|rest| rest.strip_suffix(']'));
        if let Some((local, remote)) = inode.and_then(|inode| by_inode.get(inode)) {
            out.push_str(&format!("{} {local} {remote}\n", entry.file_name().to_string_lossy()));
        }
    }
    out
}

/// fd -> (local port, remote port), from `sockets`' output.
fn ports(text: &str) -> HashMap<u64, (u16, u16)> {
    text.lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace().map(str::parse::<u64>);
            let (Some(Ok(fd)), Some(Ok(local)), Some(Ok(remote))) = (fields.next(), fields.next(), fields.next())
            else {
                return None;
            };
            Some((fd, (u16::try_from(local).ok()?, u16::try_from(remote).ok()?)))
        })
        .collect()
}

/// One tracepoint event of `perf script -F comm,pid,tid,time,event,trace`.
struct Call {
    thread: String,
    pid: u32,
    tid: u32,
    /// Microseconds.
    at: f64,
    syscall: String,
    entering: bool,
    /// The first argument (a file descriptor) of an entry, the return value of an exit.
    value: i64,
}

impl Call {
    fn parse(line: &str) -> Option<Call> {
        let tokens: Vec<&str> = line.split_whitespace().collect();
        // The thread's name may hold spaces: the fields are found from `pid/tid`, the first token with a slash
        // between two numbers followed by a time.
        let at = tokens.windows(2).position(|pair| {
            pair[0].split_once('/').is_some_and(|(p, t)| p.parse::<u32>().is_ok() && t.parse::<u32>().is_ok())
                && pair[1].strip_suffix(':').is_some_and(|time| time.parse::<f64>().is_ok())
        })?;
        let (pid, tid) = tokens[at].split_once('/')?;
        let (entering, syscall) = match tokens.get(at + 2)?.strip_prefix("syscalls:sys_")?.strip_suffix(':')? {
            name if name.starts_with("enter_") => (true, &name["enter_".len()..]),
            name => (false, name.strip_prefix("exit_")?),
        };
        let value = if entering { tokens.get(at + 4)?.trim_end_matches(',') } else { tokens.get(at + 3)? };
        Some(Call {
            thread: tokens[..at].join(" "),
            pid: pid.parse().ok()?,
            tid: tid.parse().ok()?,
            at: tokens[at + 1].trim_end_matches(':').parse::<f64>().ok()? * 1e6,
            syscall: syscall.to_string(),
            entering,
            value: u64::from_str_radix(value.trim_start_matches("0x"), 16).ok()? as i64,
        })
    }
}

/// One request's moments (microseconds), as the trace shows them.
#[derive(Clone, Default)]
struct Request {
    sent: f64,
    read: Option<f64>,
    upstream_sent: Option<f64>,
    upstream_answered: Option<f64>,
    log_write: Option<(f64, f64)>,
    answered: Option<f64>,
    received: Option<f64>,
}

/// Follows the requests of every client connection through the trace.
struct Requests {
    server: u32,
    client: u32,
    /// Server fd -> the client connection (the client's local port) it serves.
    server_side: HashMap<u64, u16>,
    /// Client fd -> its local port.
    client_side: HashMap<u64, u16>,
    /// Per client connection, the request under way.
    open: HashMap<u16, Request>,
    /// Connections whose request was read and not yet sent upstream, in order.
    to_send: VecDeque<u16>,
    /// Upstream fd -> the connection whose request it carries.
    upstream: HashMap<u64, u16>,
    /// Entries of system calls not yet exited, by thread: (syscall, fd, time).
    entered: HashMap<u32, (String, i64, f64)>,
    /// The log writes that ended, as (start, end).
    log_writes: Vec<(f64, f64)>,
    done: Vec<Request>,
}

impl Requests {
    fn new(
        server: u32,
        server_ports: &HashMap<u64, (u16, u16)>,
        client: u32,
        client_ports: &HashMap<u64, (u16, u16)>,
    ) -> Self {
        let client_side: HashMap<u64, u16> = client_ports.iter().map(|(fd, (local, _))| (*fd, *local)).collect();
        let connections: Vec<u16> = client_side.values().copied().collect();
        let server_side = server_ports
            .iter()
            .filter(|(_, (_, remote))| connections.contains(remote))
            .map(|(fd, (_, remote))| (*fd, *remote))
            .collect();
        Requests {
            server,
            client,
            server_side,
            client_side,
            open: HashMap::new(),
            to_send: VecDeque::new(),
            upstream: HashMap::new(),
            entered: HashMap::new(),
            log_writes: Vec::new(),
            done: Vec::new(),
        }
    }

    fn follow(&mut self, call: Call) {
        if call.entering {
            self.entered.insert(call.tid, (call.syscall.clone(), call.value, call.at));
            if call.pid == self.server && call.syscall != "recvfrom" && call.syscall != "pwrite64" {
                self.server_sends(call.value as u64, call.at);
            } else if call.pid == self.client
                && call.syscall == "sendto"
                && let Some(&connection) = self.client_side.get(&(call.value as u64))
            {
                self.open.insert(connection, Request { sent: call.at, ..Request::default() });
            }
            return;
        }
        let Some((syscall, fd, entered)) = self.entered.remove(&call.tid) else { return };
        let (fd, returned) = (fd as u64, call.value);
        if syscall == "pwrite64" && call.pid == self.server && call.thread == LOG_THREAD {
            self.log_writes.push((entered, call.at));
        }
        if syscall != "recvfrom" || returned <= 0 {
            return;
        }
        if call.pid == self.client {
            let Some(connection) = self.client_side.get(&fd) else { return };
            if let Some(request) = self.open.remove(connection).filter(|r| r.answered.is_some()) {
                self.done.push(Request { received: Some(call.at), ..request });
            }
        } else if call.pid == self.server {
            if let Some(&connection) = self.server_side.get(&fd) {
                if let Some(request) = self.open.get_mut(&connection).filter(|r| r.read.is_none()) {
                    request.read = Some(call.at);
                    self.to_send.push_back(connection);
                }
            } else if let Some(request) = self.upstream.remove(&fd).and_then(|c| self.open.get_mut(&c)) {
                request.upstream_answered.get_or_insert(call.at);
            }
        }
    }

    /// A send by the server: the response on a client connection, or else a request upstream.
    fn server_sends(&mut self, fd: u64, at: f64) {
        if let Some(connection) = self.server_side.get(&fd) {
            self.to_send.retain(|c| c != connection);
            let log_writes = &self.log_writes;
            if let Some(request) = self.open.get_mut(connection).filter(|r| r.read.is_some() && r.answered.is_none()) {
                request.answered = Some(at);
                let after = request.upstream_answered.unwrap_or(f64::MAX);
                request.log_write = log_writes.iter().rev().find(|(start, end)| *start >= after && *end <= at).copied();
            }
        } else if let Some(connection) = self.to_send.pop_front()
            && let Some(request) = self.open.get_mut(&connection)
        {
            request.upstream_sent = Some(at);
            self.upstream.insert(fd, connection);
        }
    }
}

/// How many of the slowest requests are listed one by one.
const LISTED: usize = 12;

/// A request followed from end to end.
struct Followed {
    /// When the client sent it, in microseconds from the trace's first request.
    sent: f64,
    /// Each stage's duration, in the order of the report's stage names.
    stages: Vec<f64>,
    total: f64,
}

/// Each stage's percentiles and its mean over the slowest 1% of requests, then the slowest requests one by
/// one (when they were sent tells a burst from a lone one), as a markdown section.
fn report(lane: &str, requests: &[Request]) -> String {
    let upstream = requests.iter().any(|r| r.upstream_answered.is_some());
    let logged = requests.iter().any(|r| r.log_write.is_some());
    let first = requests.first().map_or(0.0, |r| r.sent);
    // A request that lacks a moment its lane's stages need was cut by the trace's ends (or matched wrongly):
    // it is left out, and counted.
    let mut followed: Vec<Followed> = requests
        .iter()
        .filter_map(|r| {
            let mut moments = vec![r.sent, r.read?];
            if upstream {
                moments.extend([r.upstream_sent?, r.upstream_answered?]);
            }
            if logged {
                moments.extend([r.log_write?.0, r.log_write?.1]);
            }
            moments.extend([r.answered?, r.received?]);
            let stages: Vec<f64> = moments.windows(2).map(|pair| pair[1] - pair[0]).collect();
            let total = moments[moments.len() - 1] - r.sent;
            stages.iter().all(|stage| *stage >= 0.0).then_some(Followed { sent: r.sent - first, stages, total })
        })
        .collect();
    followed.sort_by(|a, b| b.total.total_cmp(&a.total));
    if followed.is_empty() {
        return format!("## {lane}: no request followed of {}\n\n", requests.len());
    }

    let mut names = vec!["client send -> server read"];
    if upstream {
        names.extend(["server: read -> upstream send", "upstream: send -> answer"]);
    }
    match (upstream, logged) {
        (true, true) => names.extend([
            "server: answer -> log write starts",
            "log write (`pwrite64`, O_DSYNC)",
            "server: log write ends -> response",
        ]),
        (true, false) => names.push("server: answer -> response"),
        _ => names.push("server: read -> response"),
    }
    names.push("server response -> client read");

    let slowest = &followed[..followed.len().div_ceil(100)];
    let row = |name: &str, value: &dyn Fn(&Followed) -> f64| {
        let mut values: Vec<f64> = followed.iter().map(value).collect();
        values.sort_by(f64::total_cmp);
        let p = |q| harness::percentile(&values, q);
        let slow = slowest.iter().map(value).sum::<f64>() / slowest.len().max(1) as f64;
        format!("| {name} | {:.0} | {:.0} | {:.0} | {slow:.0} |\n", p(0.5), p(0.9), p(0.99))
    };
    let mut out = format!(
        "## {lane}: {} requests followed ({} left out)\n\n| stage | p50 | p90 | p99 | slowest 1%: mean |\n|---|---|---|---|---|\n",
        followed.len(),
        requests.len() - followed.len()
    );
    for (stage, name) in names.iter().enumerate() {
        out.push_str(&row(name, &|f| f.stages[stage]));
    }
    out.push_str(&row("**total**", &|f| f.total));
    out.push_str(&format!(
        "\nThe {LISTED} slowest, each stage in the order above:\n\n| sent at (ms) | stages | total |\n|---|---|---|\n"
    ));
    for f in followed.iter().take(LISTED) {
        let stages: Vec<String> = f.stages.iter().map(|stage| format!("{stage:.0}")).collect();
        out.push_str(&format!("| {:.1} | {} | {:.0} |\n", f.sent / 1000.0, stages.join(" + "), f.total));
    }
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request through a server with an upstream and a log write, as `perf script` prints it: client fd
    /// 3 (port 5000) to server fd 7; the server's upstream socket is fd 9, unknown to the snapshot.
    const TRACE: &str = "\
fixed-rate 10/11 1.000000: syscalls:sys_enter_sendto: fd: 0x00000003, buff: 0x1, len: 0x10
fixed-rate 10/11 1.000002: syscalls:sys_exit_sendto: 0x10
actix-rt|system 20/21 1.000050: syscalls:sys_enter_recvfrom: fd: 0x00000007, ubuf: 0x1, size: 0x2000
actix-rt|system 20/21 1.000051: syscalls:sys_exit_recvfrom: 0x10
actix-rt|system 20/21 1.000080: syscalls:sys_enter_sendto: fd: 0x00000009, buff: 0x1, len: 0x20
actix-rt|system 20/21 1.000081: syscalls:sys_exit_sendto: 0x20
actix-rt|system 20/21 1.000200: syscalls:sys_enter_recvfrom: fd: 0x00000009, ubuf: 0x1, size: 0x2000
actix-rt|system 20/21 1.000201: syscalls:sys_exit_recvfrom: 0x30
store-syncer 20/22 1.000230: syscalls:sys_enter_pwrite64: fd: 0x00000005, buf: 0x1, count: 0x1000, pos: 0x0
store-syncer 20/22 1.000530: syscalls:sys_exit_pwrite64: 0x1000
actix-rt|system 20/21 1.000550: syscalls:sys_enter_writev: fd: 0x00000007, vec: 0x1, vlen: 0x2
actix-rt|system 20/21 1.000552: syscalls:sys_exit_writev: 0x40
fixed-rate 10/11 1.000003: syscalls:sys_enter_recvfrom: fd: 0x00000003, ubuf: 0x1, size: 0x2000
fixed-rate 10/11 1.000600: syscalls:sys_exit_recvfrom: 0x40
";

    #[test]
    fn follows_a_request_through_every_stage() {
        let mut requests = Requests::new(20, &ports("7 8080 5000\n"), 10, &ports("3 5000 8080\n"));
        // The client's blocking read enters before the server answers: order the lines by time, as perf does.
        let mut calls: Vec<Call> = TRACE.lines().filter_map(Call::parse).collect();
        calls.sort_by(|a, b| a.at.total_cmp(&b.at));
        calls.into_iter().for_each(|call| requests.follow(call));
        let report = report("lane", &requests.done);
        assert!(report.contains("1 requests followed (0 left out)"), "{report}");
        // A read counts when its call returns, a send when it is made: 51 to the server's read, 29 to the
        // upstream send, 121 upstream, 29 to the log write, 300 writing it, 20 after it, 50 back.
        assert!(report.contains("| 51 + 29 + 121 + 29 + 300 + 20 + 50 | 600 |"), "{report}");
    }

    #[test]
    fn a_thread_name_with_spaces_still_parses() {
        let call =
            Call::parse(" tokio runtime w  5/6  2.5: syscalls:sys_exit_recvfrom: 0xfffffffffffffff5").expect("parses");
        assert_eq!(
            (call.thread.as_str(), call.pid, call.tid, call.entering, call.value),
            ("tokio runtime w", 5, 6, false, -11)
        );
    }
}
