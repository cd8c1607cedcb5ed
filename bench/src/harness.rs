//! What every scenario shares: starting pinned server processes, waiting for them, and reading their CPU
//! time and memory from /proc.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// Alternating rounds per scenario; figures are their medians.
pub const ROUNDS: usize = 3;

/// Where the release binaries are (beside this one).
pub fn bin_dir() -> PathBuf {
    std::env::current_exe().ok().and_then(|p| p.parent().map(Path::to_path_buf)).unwrap_or_default()
}

/// A child process, killed when dropped.
pub struct Server {
    child: Child,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Stops the process with SIGTERM (a clean shutdown) and waits for it.
    pub fn stop(mut self) {
        let _ = Command::new("kill").arg("-TERM").arg(self.child.id().to_string()).status();
        let _ = self.child.wait();
    }
}

/// Creates an API key for `account` in the store at `data_dir` (the gateway not running yet).
pub fn create_key(mediagate: &Path, account: &str, data_dir: &Path) -> String {
    let out = Command::new(mediagate)
        .args(["keys", "create", "--account", account, "--data-dir"])
        .arg(data_dir)
        .output()
        .unwrap_or_else(|e| panic!("cannot run {}: {e}", mediagate.display()));
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Where a benched gateway's config tells it to read the simulator's keys (comma-separated) and its admin
/// token.
pub const UPSTREAM_KEY_ENV: &str = "BENCH_UPSTREAM_KEY";
pub const ADMIN_ENV: &str = "BENCH_ADMIN";

/// The config of a benched gateway: one worker on `listen`, its store in `data_dir`, the simulator at
/// `sim_addr` as region `cn-beijing`, client limits and the upstream's caps on running tasks out of the way
/// (the lanes measure the request path; `bash bench/run.sh capacity` measures the caps); `extra` is appended.
pub fn gateway_config(listen: &str, data_dir: &Path, sim_base: &str, extra: &str) -> String {
    format!(
        "listen: {listen}\ndata_dir: {}\nworkers: 1\nadmin_token_env: {ADMIN_ENV}\n\
         upstreams:\n  cn-beijing: {{base_url: '{sim_base}/cn-beijing', api_key_env: {UPSTREAM_KEY_ENV}, concurrency: {{default: {UNCAPPED}}}}}\n\
         limits: {{max_in_flight_per_account: 100000000, requests_per_second_per_key: 1000000}}\n{extra}",
        data_dir.display()
    )
}

/// A cap on running tasks no lane reaches, for the simulator (`--concurrency`) and the gateway alike.
pub const UNCAPPED: &str = "1000000000";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).map(|a| a.port()).unwrap_or(0)
}

/// Starts `program` pinned to `core`, with its output discarded.
pub fn start(core: u32, program: &Path, args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut command = Command::new("taskset");
    command.arg("-c").arg(core.to_string()).arg(program).args(args).stdout(Stdio::null()).stderr(Stdio::null());
    command.env("MEDIAGATE_LOG", "warn");
    for (k, v) in env {
        command.env(k, v);
    }
    match command.spawn() {
        Ok(child) => Server { child },
        Err(e) => panic!("cannot start {}: {e}", program.display()),
    }
}

pub fn wait_listening(addr: &str) {
    for _ in 0..400 {
        if std::net::TcpStream::connect(addr).is_ok() {
            return;
        }
        std::thread::sleep(Duration::from_millis(25));
    }
    panic!("{addr} never listened");
}

/// Process CPU time (user + system) in microseconds, from /proc.
pub fn cpu_micros(pid: u32) -> f64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    let fields: Vec<&str> = stat.rsplit(')').next().unwrap_or_default().split_whitespace().collect();
    let ticks: f64 = fields.get(11).and_then(|u| u.parse::<f64>().ok()).unwrap_or(0.0)
        + fields.get(12).and_then(|s| s.parse::<f64>().ok()).unwrap_or(0.0);
    ticks * 1_000_000.0 / 100.0
}

/// Context switches of all the process's threads so far (voluntary and not), from /proc: each is a thread
/// handing the core to another, which costs far more on some virtual machines than on others.
pub fn context_switches(pid: u32) -> u64 {
    let Ok(threads) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return 0 };
    threads
        .flatten()
        .map(|thread| {
            let status = std::fs::read_to_string(thread.path().join("status")).unwrap_or_default();
            ["voluntary_ctxt_switches", "nonvoluntary_ctxt_switches"]
                .iter()
                .filter_map(|field| status_field(&status, field))
                .sum::<u64>()
        })
        .sum()
}

/// Resident set size in bytes, from /proc.
pub fn rss_bytes(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    status_field(&status, "VmRSS").unwrap_or(0) * 1024
}

/// The number a `/proc/.../status` file gives for `field` (its unit, if any, dropped).
fn status_field(status: &str, field: &str) -> Option<u64> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|value| value.trim().trim_end_matches("kB").trim().parse().ok())
}

pub fn median(mut values: Vec<f64>) -> f64 {
    values.sort_by(|a, b| a.total_cmp(b));
    values.get(values.len() / 2).copied().unwrap_or(0.0)
}

/// The p-th percentile (0..=1) of sorted values.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    sorted[((sorted.len() - 1) as f64 * p).round() as usize]
}

pub fn met(ok: bool) -> &'static str {
    if ok { "met" } else { "NOT met" }
}

/// [`call`] with a deadline long enough for any bench request.
pub fn http(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> (u16, String) {
    call(addr, method, path, headers, body, Duration::from_secs(60))
}

/// One HTTP/1.1 call (one connection, `Connection: close`) with a deadline; status and body, status 0 if the
/// connection was refused or nothing answered in time.
pub fn call(
    addr: &str,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &str,
    timeout: Duration,
) -> (u16, String) {
    let Ok(socket) = addr.parse() else { return (0, String::new()) };
    let Ok(mut stream) = std::net::TcpStream::connect_timeout(&socket, timeout) else { return (0, String::new()) };
    let _ = stream.set_read_timeout(Some(timeout));
    let mut request =
        format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n", body.len());
    for (k, v) in headers {
        request.push_str(&format!("{k}: {v}\r\n"));
    }
    request.push_str("\r\n");
    request.push_str(body);
    if stream.write_all(request.as_bytes()).is_err() {
        return (0, String::new());
    }
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let answer = String::from_utf8_lossy(&answer);
    let status = answer.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    (status, answer.split_once("\r\n\r\n").map(|(_, b)| b.to_string()).unwrap_or_default())
}

/// Task id -> when the gateway settled it (epoch ms): the admin usage log's `at_ms`, the task's
/// `finished_ms`. `filter` is the log's query string, if any (`?account=...`).
pub fn settlement_times(gateway: &str, admin: &str, filter: &str) -> std::collections::HashMap<String, i64> {
    let auth = format!("Bearer {admin}");
    let (_, body) = http(gateway, "GET", &format!("/admin/v1/usage{filter}"), &[("Authorization", &auth)], "");
    body.lines()
        .filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        .filter_map(|r| Some((r["task_id"].as_str()?.to_string(), r["at_ms"].as_i64()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::status_field;

    #[test]
    fn a_status_field_is_read_by_its_exact_name_without_its_unit() {
        let status =
            "Name:\tmediagate\nVmRSS:\t  30720 kB\nvoluntary_ctxt_switches:\t12\nnonvoluntary_ctxt_switches:\t3\n";
        assert_eq!(status_field(status, "VmRSS"), Some(30720));
        assert_eq!(status_field(status, "voluntary_ctxt_switches"), Some(12));
        assert_eq!(status_field(status, "nonvoluntary_ctxt_switches"), Some(3));
        assert_eq!(status_field(status, "VmHWM"), None);
    }
}
