//! Generated clients keep working: `tests/clients/check.sh` generates a TypeScript client (openapi-typescript,
//! compiled by `tsc --strict`) and Python types (datamodel-code-generator) from the running gateway's
//! `/openapi.json`, checks every example request against both, and runs a job to success through each. An
//! example the contract does not take fails it. `tests/all.sh` installs the generators under `target/tools`.
#![allow(clippy::unwrap_used)]

mod common;

use common::{Demo, KEY};
use std::path::Path;
use std::process::Command;

fn check(demo: &Demo, examples: Option<&Path>) -> (bool, String) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut command = Command::new("bash");
    command.arg(root.join("tests/clients/check.sh")).arg(&demo.base).arg(KEY);
    if let Some(dir) = examples {
        command.arg(dir);
    }
    let output = command.output().unwrap();
    let said = format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.success(), said)
}

#[test]
fn clients_generated_from_the_openapi_take_every_example_and_run_a_job_to_success() {
    let tools = Path::new(env!("CARGO_MANIFEST_DIR")).join("target/tools");
    assert!(
        tools.join("clients/node_modules/.bin/openapi-typescript").exists()
            && tools.join("venv/bin/datamodel-codegen").exists(),
        "the client generators are missing: tests/all.sh installs them under target/tools"
    );
    let demo = Demo::start();
    let examples = std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/requests")).unwrap().count();
    let (passed, said) = check(&demo, None);
    assert!(passed, "{said}");
    for line in [
        format!("typescript: {examples} example requests typed"),
        format!("python: {examples} example requests validated"),
    ] {
        assert!(said.contains(&line), "no `{line}` in:\n{said}");
    }
    assert!(said.contains("typescript: task-") && said.contains("python: task-"), "{said}");

    // An example the published contract does not take fails the check.
    let dir = tempfile::tempdir().unwrap();
    let body = serde_json::json!({"model": "alpha2.6-t2v_t2v", "prompt": "a fox", "duration": "ten"});
    std::fs::write(dir.path().join("alpha2.6-t2v_t2v.json"), body.to_string()).unwrap();
    let (passed, said) = check(&demo, Some(dir.path()));
    assert!(!passed, "{said}");
    assert!(said.contains("examples.ts") && said.contains("duration"), "{said}");
}
