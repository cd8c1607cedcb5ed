//! A small HTTP/1.1 keep-alive load generator: closed loop for maximum throughput, or open loop at a fixed
//! rate with latency measured from each request's scheduled time (no coordinated omission).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

/// One request to send, fully formed.
#[derive(Clone)]
pub struct Request {
    pub addr: String,
    pub bytes: Arc<Vec<u8>>,
}

impl Request {
    pub fn new(addr: &str, method: &str, path: &str, headers: &[(&str, &str)], body: &str) -> Request {
        let mut text = format!("{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\n", body.len());
        for (k, v) in headers {
            text.push_str(&format!("{k}: {v}\r\n"));
        }
        text.push_str("\r\n");
        text.push_str(body);
        Request { addr: addr.to_string(), bytes: Arc::new(text.into_bytes()) }
    }
}

struct Connection {
    reader: BufReader<TcpStream>,
    writer: TcpStream,
}

impl Connection {
    fn open(addr: &str) -> std::io::Result<Connection> {
        let stream = TcpStream::connect(addr)?;
        stream.set_nodelay(true)?;
        Ok(Connection { writer: stream.try_clone()?, reader: BufReader::new(stream) })
    }

    /// Sends one request and reads the whole response; returns the status.
    fn call(&mut self, request: &[u8]) -> std::io::Result<u16> {
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
        Ok(status)
    }
}

/// What a run measured.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub requests: u64,
    pub errors: u64,
    pub seconds: f64,
    /// Latencies in microseconds, sorted.
    pub latencies: Vec<u64>,
}

impl Outcome {
    pub fn rate(&self) -> f64 {
        self.requests as f64 / self.seconds
    }

    pub fn percentile(&self, p: f64) -> f64 {
        if self.latencies.is_empty() {
            return 0.0;
        }
        let i = ((self.latencies.len() - 1) as f64 * p).round() as usize;
        self.latencies[i] as f64
    }
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
                        Ok(status) if status < 400 => ok += 1,
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
    Outcome { requests, errors, seconds, latencies }
}
