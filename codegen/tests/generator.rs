//! The generator against the real spec (snapshots) and against edited copies of it (extensibility and the
//! build-failing checks).
#![allow(clippy::unwrap_used)]

use mediagate_codegen::{Spec, artifacts};
use std::fs;
use std::path::{Path, PathBuf};

fn spec_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../spec")
}

/// A copy of the real spec to edit.
fn copy_spec() -> tempfile::TempDir {
    let tmp = tempfile::tempdir().unwrap();
    for sub in ["", "operations", "models"] {
        fs::create_dir_all(tmp.path().join(sub)).unwrap();
        for entry in fs::read_dir(spec_dir().join(sub)).unwrap() {
            let path = entry.unwrap().path();
            if path.is_file() {
                fs::copy(&path, tmp.path().join(sub).join(path.file_name().unwrap())).unwrap();
            }
        }
    }
    tmp
}

fn load_errors(dir: &Path) -> String {
    match Spec::load(dir) {
        Ok(_) => panic!("the spec should not load"),
        Err(errors) => errors.to_string(),
    }
}

#[test]
fn generated_code_and_schemas_match_the_snapshots() {
    let spec = Spec::load(&spec_dir()).unwrap_or_else(|e| panic!("{e}"));
    let artifacts = artifacts(&spec);
    let snapshots = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots");
    for name in [
        "generated.rs",
        "schemas/openapi.json",
        "schemas/published/operations/vace.json",
        "schemas/canonical/models/alpha2.6-i2v-flash_i2v.json",
        "schemas/published/models/alphax-style-repaint-v1_style_repaint.json",
    ] {
        let artifact = artifacts.iter().find(|a| a.path == Path::new(name)).unwrap();
        let file = snapshots.join(name.replace('/', "__"));
        expectorate::assert_contents(file, &artifact.contents);
    }
}

#[test]
fn adding_an_operation_is_one_yaml_file_plus_its_endpoint_and_a_model() {
    let tmp = copy_spec();
    fs::write(
        tmp.path().join("operations/upscale.yaml"),
        r#"operation: upscale
media: image
summary: Upscales an image.
fields:
  model: {type: string, description: Model id., required: true, upstream: {to: none}}
  image: {type: media, description: Source image., required: true, upstream: {to: input, name: image_url}}
  factor: {type: integer, description: Scale factor., minimum: 2, maximum: 4, upstream: {to: parameters}}
"#,
    )
    .unwrap();
    let endpoints = fs::read_to_string(tmp.path().join("endpoints.yaml")).unwrap();
    fs::write(tmp.path().join("endpoints.yaml"), endpoints.replace("xpainting]", "xpainting, upscale]")).unwrap();
    fs::write(
        tmp.path().join("models/extra.yaml"),
        r#"models:
  - id: image-upscaler_upscale
    model_code: image-upscaler
    operation: upscale
    type: image
    task_mode: async
    region: cn-beijing
    route: image2image
    summary: Upscaler.
    deadline_seconds: 600
    expected_seconds: 20
    limits:
      factor: {maximum: 3}
    billing: {placeholder: true, per_image: 10000}
"#,
    )
    .unwrap();
    let spec = Spec::load(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
    let artifacts = artifacts(&spec);
    let code = &artifacts.iter().find(|a| a.path == Path::new("generated.rs")).unwrap().contents;
    assert!(code.contains("pub struct UpscaleRequest"));
    assert!(code.contains("id: \"image-upscaler_upscale\""));
    let schema =
        artifacts.iter().find(|a| a.path == Path::new("schemas/canonical/models/image-upscaler_upscale.json")).unwrap();
    let schema: serde_json::Value = serde_json::from_str(&schema.contents).unwrap();
    assert_eq!(schema["properties"]["factor"]["maximum"], 3);
    assert_eq!(schema["required"], serde_json::json!(["image", "model"]));
    let openapi = artifacts.iter().find(|a| a.path == Path::new("schemas/openapi.json")).unwrap();
    assert!(openapi.contents.contains("image-upscaler_upscale"));
}

/// Appends `text` to a model file of the copy and returns the load errors.
fn with_model(text: &str) -> String {
    let tmp = copy_spec();
    fs::write(tmp.path().join("models/zz-bad.yaml"), format!("models:\n{text}")).unwrap();
    load_errors(tmp.path())
}

const MODEL: &str = r#"  - id: bad_t2v
    model_code: bad
    operation: t2v
    type: video
    task_mode: async
    region: cn-beijing
    route: video-synthesis
    summary: x
    deadline_seconds: 10
    expected_seconds: 5
    billing: {per_call: 1}
"#;

#[test]
fn a_bad_spec_fails_with_file_line_and_a_plain_message() {
    let unknown_field = with_model(&MODEL.replace("summary: x", "summary: x\n    colour: red"));
    assert!(unknown_field.contains("zz-bad.yaml:") && unknown_field.contains("colour"), "{unknown_field}");

    let unknown_op = with_model(&MODEL.replace("operation: t2v", "operation: t2x"));
    assert!(unknown_op.contains("zz-bad.yaml:4:") && unknown_op.contains("unknown operation `t2x`"), "{unknown_op}");

    let duplicate = with_model(&MODEL.replace("bad_t2v", "alpha2.6-t2v_t2v"));
    assert!(duplicate.contains("zz-bad.yaml:2:") && duplicate.contains("duplicate model id"), "{duplicate}");

    let missing_field = with_model(&format!("{MODEL}    limits:\n      template: {{forbidden: true}}\n"));
    assert!(missing_field.contains("limit on `template`, a field operation `t2v` does not have"), "{missing_field}");

    let no_route =
        with_model(&MODEL.replace("route: video-synthesis", "route: out-painting").replace("cn-beijing", "us-east-1"));
    assert!(no_route.contains("region `us-east-1` has no upstream route `out-painting`"), "{no_route}");
}

#[test]
fn an_upstream_that_spells_its_headers_and_root_differently_is_a_spec_edit() {
    let tmp = copy_spec();
    let upstream = fs::read_to_string(tmp.path().join("upstream.yaml")).unwrap();
    let renamed = upstream
        .replace("api_root: /api/v1", "api_root: /v2/gen")
        .replace("{name: X-Upstream-Async, value: enable}", "{name: X-Acme-Mode, value: async}")
        .replace("{name: X-Upstream-DataInspection, value: enable}", "{name: X-Acme-Inspect, value: \"on\"}");
    fs::write(tmp.path().join("upstream.yaml"), &renamed).unwrap();
    let spec = Spec::load(tmp.path()).unwrap_or_else(|e| panic!("{e}"));
    let artifacts = artifacts(&spec);
    let code = &artifacts.iter().find(|a| a.path == Path::new("generated.rs")).unwrap().contents;
    assert!(code.contains("api_root: \"/v2/gen\""), "{code}");
    assert!(code.contains("name: \"X-Acme-Mode\"") && code.contains("value: \"async\""));
    assert!(code.contains("name: \"X-Acme-Inspect\"") && code.contains("value: \"on\""));

    fs::write(tmp.path().join("upstream.yaml"), renamed.replace("X-Acme-Mode", "X Acme Mode")).unwrap();
    let errors = load_errors(tmp.path());
    assert!(errors.contains("upstream.yaml:") && errors.contains("`X Acme Mode` is not a header name"), "{errors}");
    fs::write(tmp.path().join("upstream.yaml"), upstream.replace("api_root: /api/v1", "api_root: api/v1/")).unwrap();
    let errors = load_errors(tmp.path());
    assert!(errors.contains("`api_root` must start with `/`"), "{errors}");
}
