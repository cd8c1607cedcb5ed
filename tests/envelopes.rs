//! The typed requests render the exact upstream envelope of docs/upstream-protocol.md: every example request
//! is admitted and its envelope (JSON text) compared with the hand-written expectation in examples/upstream/,
//! with and without the gateway's own `callback_url`.
#![allow(clippy::unwrap_used)]

use mediagate::domain::admission::admit;
use mediagate::domain::catalog::ModelSpec;
use mediagate::domain::registry::Registry;
use serde_json::Value;
use std::path::Path;

#[test]
fn every_example_renders_its_expected_upstream_envelope() {
    let registry = Registry::new(Vec::new()).unwrap();
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples");
    let mut compared = 0;
    let mut operations = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(root.join("requests")).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_owned();
        let request: Value = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        let model = ModelSpec::find(request["model"].as_str().unwrap()).unwrap();
        let admitted =
            admit(&registry, model.endpoint(), request.clone()).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        let expected_path = root.join("upstream").join(&name);
        let expected: Value = serde_json::from_str(&std::fs::read_to_string(&expected_path).unwrap())
            .unwrap_or_else(|e| panic!("{}: {e}", expected_path.display()));
        let envelope: Value = serde_json::from_slice(&admitted.envelope)
            .unwrap_or_else(|e| panic!("{}: the envelope is not JSON: {e}", path.display()));
        assert_eq!(envelope, expected, "{}", path.display());
        // Written back compactly it is the same text: valid, compact, and no member written twice.
        assert_eq!(serde_json::to_vec(&envelope).unwrap(), admitted.envelope, "{}", path.display());
        // A gateway field is never sent upstream: with a `callback_url` the envelope is the same.
        let mut hooked = request.clone();
        hooked["callback_url"] = "https://hooks.example/mediagate".into();
        let admitted = admit(&registry, model.endpoint(), hooked).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert_eq!(admitted.envelope, serde_json::to_vec(&envelope).unwrap(), "{}: callback_url", path.display());
        operations.insert(model.operation.as_str());
        compared += 1;
    }
    assert!(compared > 0);
    let seeded: std::collections::BTreeSet<&str> =
        mediagate::domain::catalog::MODELS.iter().map(|m| m.operation.as_str()).collect();
    assert_eq!(operations, seeded, "at least one example per operation that has a model");
}
