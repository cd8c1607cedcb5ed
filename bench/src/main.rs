//! `bash bench/run.sh [SCENARIO...]`: runs the bench scenarios on this machine (all of them by default:
//! `forward`, `poller`, `restart`, `disk`, `postgres`, `poller-replicas`, `capacity`, `capacity-replicas`,
//! `retention`),
//! prints one report and writes it
//! under bench/results/.
//!
//! Servers are pinned to core 0 and load generators and the simulator to core 1, as the issue asks;
//! figures are medians of alternating rounds, quoted with ratios measured side by side.

mod capacity;
mod disk;
mod forward;
mod harness;
mod loadgen;
mod poller_scale;
mod postgres;
mod restart;
mod retention;

use std::process::Command;

const SCENARIOS: [&str; 9] = [
    "forward",
    "poller",
    "restart",
    "disk",
    "postgres",
    "poller-replicas",
    "capacity",
    "capacity-replicas",
    "retention",
];

fn main() {
    let asked: Vec<String> = std::env::args().skip(1).collect();
    if let Some(unknown) = asked.iter().find(|a| !SCENARIOS.contains(&a.as_str())) {
        eprintln!("unknown scenario `{unknown}`; scenarios: {}", SCENARIOS.join(", "));
        std::process::exit(2);
    }
    let wanted = |name: &str| asked.is_empty() || asked.iter().any(|a| a == name);
    let mut report = header();
    if wanted("forward") {
        report.push_str(&forward::run());
    }
    if wanted("poller") {
        report.push_str(&poller_scale::run());
    }
    if wanted("restart") {
        report.push_str(&restart::run());
    }
    if wanted("disk") {
        report.push_str(&disk::run());
    }
    if wanted("postgres") {
        report.push_str(&postgres::run());
    }
    if wanted("poller-replicas") {
        report.push_str(&poller_scale::run_replicas());
    }
    if wanted("capacity") {
        report.push_str(&capacity::run());
    }
    if wanted("capacity-replicas") {
        report.push_str(&capacity::run_replicas());
    }
    if wanted("retention") {
        report.push_str(&retention::run());
    }
    println!("{report}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let _ = std::fs::create_dir_all(&dir);
    let stamp = shell("date", &["+%Y-%m-%dT%H%M"]);
    let _ = std::fs::write(dir.join(format!("{stamp}.md")), &report);
}

fn header() -> String {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let machine = cpuinfo
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .unwrap_or("")
        .trim()
        .to_string();
    let cores = cpuinfo.matches("processor\t").count();
    format!(
        "# mediagate bench, {}\n\nMachine: {machine}, {cores} cores. Servers pinned to core 0, simulator and load to \
         core 1. Medians of {} alternating rounds; latencies in microseconds.\n\n",
        shell("date", &["-u"]),
        harness::ROUNDS
    )
}

fn shell(program: &str, args: &[&str]) -> String {
    Command::new(program)
        .args(args)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
