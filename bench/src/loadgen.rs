//! Load: `wrk` (Debian's package, event-driven, so one core drives tens of thousands of requests per second)
//! for maximum throughput, and a small in-repo HTTP/1.1 keep-alive generator for single-connection latency
//! and for fixed rates, where latency is measured from each request's scheduled time (no coordinated
//! omission). Without `wrk` on the PATH the in-repo generator measures throughput too.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request to send, fully formed.
#[derive(Clone)]
pub struct Request {
    pub addr: String,
    pub bytes: Arc<Vec<u8>>,
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: String,
}

impl Request {
    pub fn new(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request {
        let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        text.push_str("\r\n");
        text.push_str(body);
        Request {
            addr: addr.to_string(),
            bytes: Arc::new(text.into_bytes()),
            method: method.to_string(),
            path: path.to_string(),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            body: body.to_string(),
        }
    }
}

/// A keep-alive HTTP/1.1 connection that reads whole answers.
pub struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    pub fn open(addr: &str) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Connection { writer: stream.try_clone()?, reader: BufReader::new(stream) })
    }

    /// Sends one request and reads the whole response; returns the status and the body.
    pub fn call(&mut self, request: &[u8]) -> std::io::Result<(u16, Vec<u8>)> {
        self.writer.write_all(request)?;
        let mut line = String::new();
        self.reader.read_line(&mut line)?;
        let status = line.split_whitespace().nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
        let mut length = 0usize;
        loop {
            line.clear();
            self.reader.read_line(&mut line)?;
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some((k, v)) = line.split_once(':')
                && k.eq_ignore_ascii_case("content-length")
            {
                length = v.trim().parse().unwrap_or(0);
            }
        }
        let mut body = vec![0u8; length];
        self.reader.read_exact(&mut body)?;
        Ok((status, body))
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Latency percentiles in microseconds.
    pub p50: f64,
    pub p99: f64,
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds
    }
}

/// Maximum throughput over `connections`, with `wrk` when it is installed.
pub fn saturate(request: &Request, connections: usize, duration: Duration) -> Outcome {
    wrk(request, connections, duration).unwrap_or_else(|| closed_loop(request, connections, duration))
}

/// One `wrk` run (one thread, so it stays on the load core); `None` when wrk is missing or failed.
fn wrk(request: &Request, connections: usize, duration: Duration) -> Option<Outcome> {
    let script = tempfile::Builder::new().suffix(".lua").tempfile().ok()?;
    let quote = |s: &str| format!("{s:?}");
    let mut lua = format!("wrk.method = {}\nwrk.body = {}\n", quote(&request.method), quote(&request.body));
    for (k, v) in &request.headers {
        lua.push_str(&format!("wrk.headers[{}] = {}\n", quote(k), quote(v)));
    }
    std::fs::write(script.path(), lua).ok()?;
    let output = std::process::Command::new("wrk")
        .args(["-t1", &format!("-c{connections}"), &format!("-d{}s", duration.as_secs().max(1)), "--latency", "-s"])
        .arg(script.path())
        .arg(format!("http://{}{}", request.addr, request.path))
        .output()
        .ok()?;
    let text = String::from_utf8_lossy(&output.stdout);
    let number_after = |label: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.trim_start().starts_with(label))?;
        line.trim_start()[label.len()..].split_whitespace().next()?.parse().ok()
    };
    let latency = |label: &str| -> Option<f64> {
        let line = text.lines().find(|l| l.trim_start().starts_with(label))?;
        let value = line.split_whitespace().nth(1)?;
        let (number, unit) = value.split_at(value.find(|c: char| c.is_ascii_alphabetic())?);
        let scale = match unit {
            "us" => 1.0,
            "ms" => 1_000.0,
            "s" => 1_000_000.0,
            _ => return None,
        };
        Some(number.parse::<f64>().ok()? * scale)
    };
    let seconds = duration.as_secs_f64();
    let rate = number_after("Requests/sec:")?;
    let total = (rate * seconds) as u64;
    let errors = number_after("Non-2xx or 3xx responses:").unwrap_or(0.0) as u64;
    Some(Outcome {
        requests: total.saturating_sub(errors),
        errors,
        seconds,
        p50: latency("50%")?,
        p99: latency("99%")?,
    })
}

/// `connections` loops, each sending as fast as answers come, for `duration`.
pub fn closed_loop(request: &Request, connections: usize, duration: Duration) -> Outcome {
    run(request, connections, duration, None)
}

/// `rate` requests per second spread over `connections`, for `duration`.
pub fn fixed_rate(request: &Request, connections: usize, rate: f64, duration: Duration) -> Outcome {
    run(request, connections, duration, Some(rate))
}

fn run(request: &Request, connections: usize, duration: Duration, rate: Option<f64>) -> Outcome {
    let results = Arc::new(Mutex::new((0u64, 0u64, Vec::new())));
    let start = Instant::now();
    let threads: Vec<_> = (0..connections)
        .map(|i| {
            let (request, results) = (request.clone(), results.clone());
            std::thread::spawn(move || {
                let Ok(mut conn) = Connection::open(&request.addr) else { return };
                let interval = rate.map(|r| Duration::from_secs_f64(connections as f64 / r));
                let mut scheduled =
                    start + interval.map_or(Duration::ZERO, |iv| iv.mul_f64(i as f64 / connections as f64));
                let (mut ok, mut errors, mut latencies) = (0u64, 0u64, Vec::new());
                while start.elapsed() < duration {
                    if interval.is_some() {
                        let now = Instant::now();
                        if scheduled > now {
                            std::thread::sleep(scheduled - now);
                        }
                    }
                    let sent = if interval.is_some() { scheduled } else { Instant::now() };
                    match conn.call(&request.bytes) {
                        Ok((status, _)) if status < 400 => ok += 1,
                        Ok(_) => errors += 1,
                        Err(_) => {
                            errors += 1;
                            match Connection::open(&request.addr) {
                                Ok(c) => conn = c,
                                Err(_) => break,
                            }
                        }
                    }
                    latencies.push(sent.elapsed().as_micros() as u64);
                    if let Some(iv) = interval {
                        scheduled += iv;
                    }
                }
                let mut all = results.lock().unwrap_or_else(|e| e.into_inner());
                all.0 += ok;
                all.1 += errors;
                all.2.extend(latencies);
            })
        })
        .collect();
    for t in threads {
        let _ = t.join();
    }
    let seconds = start.elapsed().as_secs_f64();
    let (requests, errors, mut latencies) = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    latencies.sort_unstable();
    let percentile = |p: f64| {
        let i = ((latencies.len().max(1) - 1) as f64 * p).round() as usize;
        latencies.get(i).copied().unwrap_or(0) as f64
    };
    Outcome { requests, errors, seconds, p50: percentile(0.5), p99: percentile(0.99) }
}
