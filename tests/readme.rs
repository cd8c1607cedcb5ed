//! The README's quickstart and TLS deployment blocks, run as a newcomer pastes them into bash: the quickstart
//! against a demo started as the README starts it, the deployment block beside it. Only what cannot be the
//! same here is changed: the ports (free ones instead of 8080, 8081 and 9443) and the binary (this test
//! build's `mediagate` on `PATH` in place of the release build the block makes). A block that fails, or
//! hangs, fails the test.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Process, free_port};
use std::path::Path;
use std::process::Command;

/// The README's `sh` block whose first line starts with `first`.
fn block(first: &str) -> String {
    let readme = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("README.md")).unwrap();
    let blocks: Vec<&str> = readme.split("```sh\n").skip(1).filter_map(|rest| rest.split("\n```").next()).collect();
    let found =
        blocks.iter().find(|b| b.starts_with(first)).unwrap_or_else(|| panic!("no README block starts `{first}`"));
    found.to_string()
}

/// Runs `script` in bash from `dir`, as `set -euo pipefail` and with this build's binary on `PATH`;
/// background jobs are stopped at its end. Returns what it printed, or fails the test with it.
fn run(script: &str, dir: &Path) -> String {
    let binaries = Path::new(env!("CARGO_BIN_EXE_mediagate")).parent().unwrap();
    let path = format!("{}:{}", binaries.display(), std::env::var("PATH").unwrap_or_default());
    let whole = format!("set -euo pipefail\ntrap 'kill $(jobs -p) 2>/dev/null || true' EXIT\n{script}\n");
    let output = Command::new("timeout")
        .args(["120", "bash", "-c", &whole])
        .current_dir(dir)
        .env("PATH", path)
        .env_remove("MEDIAGATE_ADMIN_TOKEN")
        .env_remove("MEDIAGATE_URL")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    assert!(
        output.status.success(),
        "the block failed ({}):\n{script}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        output.status
    );
    stdout.into_owned()
}

#[test]
fn the_quickstart_block_runs_against_the_demo_and_the_deployment_block_beside_it() {
    let dir = tempfile::tempdir().unwrap();
    let demo_at = free_port();
    let data_dir = dir.path().join("mediagate-demo");
    let _demo = Process::spawn(
        &["demo", "--listen", &demo_at, "--data-dir", data_dir.to_str().unwrap(), "--time-scale", "0.05"],
        &[],
    );

    let quickstart = block("KEY=$(cat mediagate-demo/demo-api-key)").replace("127.0.0.1:8080", &demo_at);
    let printed = run(&quickstart, dir.path());
    assert!(printed.contains("\"status\":\"success\""), "{printed}");
    assert!(printed.contains("\"fundable\":true"), "the quote: {printed}");
    let video = std::fs::read(dir.path().join("fox.mp4")).unwrap();
    // A real movie: its `ftyp` box first and a `moov` box with its tracks, not a stub of a few bytes.
    let has_movie = video.windows(4).any(|w| w == b"moov") && video.windows(4).any(|w| w == b"avc1");
    assert!(
        video.len() > 1000 && &video[4..8] == b"ftyp" && has_movie,
        "fox.mp4 is no H.264 MP4: {} bytes",
        video.len()
    );

    let build = "cargo build --release && export PATH=\"$PWD/target/release:$PATH\"";
    let deployment = block(build);
    let (simulator_at, gateway_at) = (free_port(), free_port());
    let deployment = deployment
        .replacen(build, "mediagate --version", 1)
        .replace("127.0.0.1:9443", &simulator_at)
        .replace("127.0.0.1:8081", &gateway_at);
    let printed = run(&deployment, dir.path());
    assert!(printed.contains("\"key\": \"mg-"), "no key was made:\n{printed}");
}

/// The README's private CA and server certificate are accepted by curl and by `mediagate admin --ca-file`.
#[test]
fn the_certificate_block_makes_a_pair_every_client_here_accepts() {
    let dir = tempfile::tempdir().unwrap();
    let tls_at = free_port();
    let script = block("openssl req -x509 -new").replace("127.0.0.1:8443", &tls_at);
    let printed = run(&script, dir.path());
    assert!(printed.contains("\"object\": \"list\""), "the admin CLI did not read the models:\n{printed}");
}
