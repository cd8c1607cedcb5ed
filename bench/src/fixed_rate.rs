//! `fixed-rate ADDR PATH RATE SECONDS KEY [BODY]`: sends RATE requests per second (a POST of BODY as JSON,
//! or a GET without one) with KEY as bearer token for SECONDS, measuring each from its scheduled time, and
//! prints `p50 p99 errors` (microseconds). For `bench/ab.sh`'s latency lane; `bench/run.sh` calls the same
//! generator in-process.

#[path = "loadgen.rs"]
#[allow(dead_code)] // the in-process bench uses the rest
mod loadgen;

use std::time::Duration;

/// Connections the rate is spread over, as `bench/run.sh` uses at 1k/s.
const CONNECTIONS: usize = 8;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [addr, path, rate, seconds, key, rest @ ..] = args.as_slice() else {
        eprintln!("usage: fixed-rate ADDR PATH RATE SECONDS KEY [BODY]");
        std::process::exit(2);
    };
    let (Ok(rate), Ok(seconds)) = (rate.parse::<f64>(), seconds.parse::<u64>()) else {
        eprintln!("RATE and SECONDS are numbers");
        std::process::exit(2);
    };
    let auth = format!("Bearer {key}");
    let request = match rest.first() {
        Some(body) => loadgen::Request::new(
            addr,
            "POST",
            path,
            &[("Authorization", &auth), ("Content-Type", "application/json")],
            body,
        ),
        None => loadgen::Request::new(addr, "GET", path, &[("Authorization", &auth)], ""),
    };
    let outcome = loadgen::fixed_rate(&request, CONNECTIONS, rate, Duration::from_secs(seconds));
    println!("{} {} {}", outcome.p50, outcome.p99, outcome.errors);
}
