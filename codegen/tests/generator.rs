//! The generator against the real spec (snapshots) and against edited copies of it (extensibility and the
//! build-failing checks).
#![allow(clippy::unwrap_used)]

use mediagate_codegen::{Spec, artifacts, lock};
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

/// Replaces the first `from` after model `model`'s record starts in `file` of a spec copy with `to`.
fn edit_record(dir: &Path, file: &str, model: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = fs::read_to_string(&path).unwrap();
    let start = text.find(&format!("- id: {model}\n")).unwrap();
    let at = start + text[start..].find(from).unwrap_or_else(|| panic!("{from} not in {model}"));
    fs::write(&path, format!("{}{to}{}", &text[..at], &text[at + from.len()..])).unwrap();
}

fn edit(dir: &Path, file: &str, from: &str, to: &str) {
    let path = dir.join(file);
    let text = fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{from} not in {file}");
    fs::write(&path, text.replacen(from, to, 1)).unwrap();
}

fn verdict(dir: &Path) -> lock::Verdict {
    lock::check(dir, &Spec::load(dir).unwrap()).unwrap()
}

#[test]
fn the_lock_holds_what_the_spec_publishes() {
    let verdict = verdict(&spec_dir());
    assert!(
        verdict.current(),
        "spec/published.lock.json is stale: run `cargo run -- schemas lock`.\n{}{:?}",
        verdict.report(),
        verdict.compatible.iter().map(ToString::to_string).collect::<Vec<_>>()
    );
}

#[test]
fn each_breaking_spec_edit_fails_saying_where_what_and_for_which_model() {
    let i2v = "alpha2.6-i2v_i2v";
    let video = "models/video.yaml";
    type Edit = Box<dyn Fn(&Path)>;
    let cases: Vec<(Edit, &str)> = vec![
        (
            Box::new(move |d| edit_record(d, video, i2v, r#""maximum": 15"#, r#""maximum": 10"#)),
            "spec/models/video.yaml:169: breaking change to the published contract: alpha2.6-i2v_i2v: duration: maximum narrowed from 15 to 10",
        ),
        (
            Box::new(move |d| edit_record(d, video, i2v, r#""default": 5}"#, r#""default": 10}"#)),
            "spec/models/video.yaml:169: breaking change to the published contract: alpha2.6-i2v_i2v: duration: default changed from 5 to 10",
        ),
        (
            Box::new(move |d| edit_record(d, video, i2v, r#", "1080p"], "default""#, r#"], "default""#)),
            "spec/models/video.yaml:170: breaking change to the published contract: alpha2.6-i2v_i2v: resolution: no longer accepts \"1080p\"",
        ),
        (
            Box::new(|d| {
                edit(d, "operations/i2v.yaml", "  prompt_extend: {type: boolean,", "  prompt_extend: {type: string,")
            }),
            "spec/operations/i2v.yaml:28: breaking change to the published contract: alpha2.6-i2v_i2v: prompt_extend: type narrowed from boolean to string",
        ),
        (
            Box::new(|d| {
                edit(d, "operations/i2v.yaml", "  prompt: {type: string,", "  prompt: {type: string, required: true,")
            }),
            "spec/operations/i2v.yaml:13: breaking change to the published contract: alpha2.6-i2v_i2v: prompt: now required",
        ),
        (
            Box::new(|d| edit(d, "operations/i2v.yaml", "    aliases: [img_url]\n", "")),
            "breaking change to the published contract: alpha2.6-i2v_i2v: img_url: alias removed",
        ),
        (
            Box::new(|d| {
                edit(
                    d,
                    "operations/i2v.yaml",
                    "  seed: {type: integer, description: Random seed for reproducible output., minimum: 0, maximum: 2147483647, upstream: {to: parameters}}\n",
                    "",
                )
            }),
            "breaking change to the published contract: alpha2.6-i2v_i2v: seed: field removed",
        ),
        (
            Box::new(|d| {
                edit(
                    d,
                    "models/image.yaml",
                    "- id: alphax-style-repaint-v1_style_repaint\n",
                    "- id: alphax-style-repaint-v2_style_repaint\n",
                )
            }),
            "spec/: breaking change to the published contract: alphax-style-repaint-v1_style_repaint: model removed",
        ),
    ];
    for (make, expected) in cases {
        let dir = copy_spec();
        make(dir.path());
        let verdict = verdict(dir.path());
        let report =
            verdict.report().replace(&format!("{}/", dir.path().file_name().unwrap().to_string_lossy()), "spec/");
        assert!(report.lines().any(|line| line.ends_with(expected)), "expected `{expected}` in:\n{report}");
        // A build never writes over it: the lock command refuses too.
        assert!(lock::write(dir.path(), &Spec::load(dir.path()).unwrap()).is_err());
    }
}

#[test]
fn a_recorded_break_and_a_compatible_change_pass_and_the_lock_command_catches_up() {
    let dir = copy_spec();
    edit_record(dir.path(), "models/video.yaml", "alpha2.6-i2v_i2v", r#""minimum": 2"#, r#""minimum": 1"#);
    let widened = verdict(dir.path());
    assert!(widened.breaking.is_empty(), "{}", widened.report());
    let said: Vec<String> = widened.compatible.iter().map(ToString::to_string).collect();
    assert!(said.contains(&"alpha2.6-i2v_i2v: duration: minimum widened from 2 to 1".to_string()), "{said:?}");
    assert!(!widened.current());
    lock::write(dir.path(), &Spec::load(dir.path()).unwrap()).unwrap();
    assert!(verdict(dir.path()).current());

    edit_record(dir.path(), "models/video.yaml", "alpha2.6-i2v_i2v", r#""maximum": 15"#, r#""maximum": 10"#);
    assert_eq!(verdict(dir.path()).breaking.len(), 1);
    let record = |date: &str| {
        let entry = format!(
            "intended_breaks:\n  - subject: alpha2.6-i2v_i2v\n    change: \"duration: maximum narrowed from 15 to 10\"\n    date: {date}\n    reason: the upstream stopped taking longer jobs\n"
        );
        fs::write(dir.path().join(lock::INTENDED_FILE), entry).unwrap();
    };
    record("2026-11-27");
    let recorded = verdict(dir.path());
    assert!(recorded.breaking.is_empty(), "{}", recorded.report());
    assert_eq!(recorded.intended.len(), 1);
    lock::write(dir.path(), &Spec::load(dir.path()).unwrap()).unwrap();
    assert!(verdict(dir.path()).current());
    record("someday");
    let refused = lock::check(dir.path(), &Spec::load(dir.path()).unwrap()).unwrap_err();
    assert!(refused.contains("YYYY-MM-DD"), "{refused}");
}
