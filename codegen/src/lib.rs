//! mediagate's code generator: reads the YAML under `spec/`, checks it, and emits the typed request structs,
//! the JSON Schemas, the OpenAPI document and the actix-web route table that the gateway `include!`s.
//!
//! `build.rs` calls [`emit`]; everything else is reachable for snapshot tests and tools.

pub mod compat;
pub mod load;
pub mod lock;
pub mod openapi;
pub mod rust;
pub mod schema;
pub mod spec;
pub mod tables;

pub use load::{Spec, SpecError, SpecErrors};

use schema::{Flavor, model_schema, operation_schema};
use std::path::{Path, PathBuf};

/// A file the generator writes, relative to the output directory.
pub struct Artifact {
    pub path: PathBuf,
    pub contents: String,
}

/// Everything generated from a spec: `generated.rs` plus the schemas under `schemas/`.
pub fn artifacts(spec: &Spec) -> Vec<Artifact> {
    let mut out = vec![Artifact { path: "generated.rs".into(), contents: rust::generate(spec) }];
    let pretty = |v: &serde_json::Value| serde_json::to_string_pretty(v).unwrap_or_default() + "\n";
    for (flavor, dir) in [(Flavor::Published, "published"), (Flavor::Canonical, "canonical")] {
        for (name, op) in &spec.operations {
            out.push(Artifact {
                path: format!("schemas/{dir}/operations/{name}.json").into(),
                contents: pretty(&operation_schema(spec, op, flavor)),
            });
        }
        for model in &spec.models {
            out.push(Artifact {
                path: format!("schemas/{dir}/models/{}.json", model.id.value).into(),
                contents: pretty(&model_schema(spec, model, flavor)),
            });
        }
    }
    out.push(Artifact { path: "schemas/openapi.json".into(), contents: pretty(&openapi::openapi(spec)) });
    out
}

/// Loads `spec_dir`, checks it and writes every artifact under `out_dir`. Returns the spec it read.
pub fn emit(spec_dir: &Path, out_dir: &Path) -> Result<Spec, Box<dyn std::error::Error>> {
    let spec = Spec::load(spec_dir)?;
    for artifact in artifacts(&spec) {
        let path = out_dir.join(&artifact.path);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        // Unchanged files keep their mtime, so cargo does not rebuild what includes them.
        if std::fs::read_to_string(&path).ok().as_deref() != Some(artifact.contents.as_str()) {
            std::fs::write(&path, &artifact.contents)?;
        }
    }
    Ok(spec)
}
