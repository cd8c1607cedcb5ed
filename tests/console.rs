//! The console end to end in a real Chromium, driven by Playwright (`tests/console/e2e.py`) against the
//! real binary: an operator opens an account, tops it up and makes a key; the client signs in with it,
//! submits from the playground, sees the task finish, its page and the usage chart change, and exports its
//! usage; the operator reads the usage, switches a model off and on, sends the task's webhook delivery
//! again and verifies the ledger, then revokes
//! the key, and the client's next request is refused. Screenshots of each page land in
//! `target/console-screenshots`. `tests/all.sh` installs Chromium (Debian's) and Playwright (a venv under
//! `target/tools`).
#![allow(clippy::unwrap_used)]

mod common;

use common::Demo;
use std::path::PathBuf;
use std::process::Command;

#[test]
fn an_operator_and_a_client_run_the_gateway_from_the_browser() {
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"));
    let python = root.join("target/tools/venv/bin/python");
    assert!(python.exists(), "Playwright is missing: tests/all.sh makes a venv with it under target/tools");
    let tmp = tempfile::tempdir().unwrap();
    // The playground's task is delivered to a loopback endpoint, which a gateway refuses unless told.
    let config = "webhooks: {allow_private_callbacks: true}";
    let demo = Demo::start_with(tmp.path(), "127.0.0.1:0", 0.05, config, &[]);
    let screenshots = root.join("target/console-screenshots");
    let _ = std::fs::remove_dir_all(&screenshots);
    let run = Command::new(&python)
        .arg(root.join("tests/console/e2e.py"))
        .args([demo.url(""), common::ADMIN_TOKEN.to_string()])
        .arg(&screenshots)
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&run.stdout), String::from_utf8_lossy(&run.stderr));
    assert!(run.status.success(), "{stdout}\n{stderr}\ngateway: {}", demo.process.stderr());
    assert!(stdout.contains("console end to end: ok"), "{stdout}");
    for page in [
        "01-sign-in",
        "04-client-home",
        "05-playground-finished",
        "09-operator-usage",
        "11-webhooks",
        "14-client-refused",
    ] {
        assert!(screenshots.join(format!("{page}.png")).exists(), "no screenshot of {page}");
    }
}
