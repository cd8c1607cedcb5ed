//! `mediagate schemas`: the published contract for client teams. `--out DIR` writes it; `lock` holds it to
//! the spec (`spec/published.lock.json`, which the build compares the spec with); `diff OLD NEW` tells a
//! client team what changed between two releases.

use crate::domain::catalog;
use mediagate_codegen::compat::{self, Severity};
use mediagate_codegen::lock;
use serde_json::Value;
use std::path::Path;

/// Writes every published schema and openapi.json under `dir`; how many files.
pub fn write(dir: &Path) -> std::io::Result<usize> {
    let write = |path: std::path::PathBuf, text: &str| -> std::io::Result<()> {
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)?;
        }
        std::fs::write(path, text)
    };
    for op in catalog::OPERATIONS {
        write(dir.join("operations").join(format!("{}.json", op.name)), op.published_schema)?;
    }
    for model in catalog::MODELS {
        write(dir.join("models").join(format!("{}.json", model.id)), model.published_schema)?;
    }
    write(dir.join("openapi.json"), catalog::OPENAPI_JSON)?;
    Ok(catalog::OPERATIONS.len() + catalog::MODELS.len() + 1)
}

/// Writes the lock of the contract the spec in `spec_dir` generates; refused while a breaking change is not
/// recorded as intended. What it says of the changes.
pub fn lock(spec_dir: &Path) -> Result<String, String> {
    let spec = mediagate_codegen::Spec::load(spec_dir).map_err(|e| e.to_string())?;
    let verdict = lock::write(spec_dir, &spec)?;
    let mut out = Vec::new();
    for (change, why) in &verdict.intended {
        out.push(format!("intended break ({why}): {change}"));
    }
    out.extend(verdict.compatible.iter().map(|change| format!("compatible: {change}")));
    let file = spec_dir.join(lock::LOCK_FILE);
    out.push(match (verdict.unlocked, verdict.current()) {
        (true, _) => format!("Wrote {}: the first lock.", file.display()),
        (false, true) => format!("{} was current.", file.display()),
        (false, false) => format!("Wrote {}.", file.display()),
    });
    Ok(out.join("\n"))
}

/// The changes from `old` to `new`, breaking first, and whether any is breaking. Each is an OpenAPI
/// document: a file, a directory holding `openapi.json` (as `--out` writes) or `published.lock.json`, or a
/// running gateway's URL (`/openapi.json` is read from it).
pub fn diff(old: &str, new: &str) -> Result<(String, bool), String> {
    let (a, b) = (read(old)?, read(new)?);
    let changes = compat::diff(&a, &b);
    let breaking = changes.iter().filter(|c| c.severity == Severity::Breaking).count();
    let mut out = Vec::new();
    for (severity, title) in [(Severity::Breaking, "Breaking"), (Severity::Compatible, "Compatible")] {
        let listed: Vec<String> = changes.iter().filter(|c| c.severity == severity).map(|c| format!("  {c}")).collect();
        if !listed.is_empty() {
            out.push(format!("{title} ({}):", listed.len()));
            out.extend(listed);
        }
    }
    out.push(format!("{breaking} breaking, {} compatible.", changes.len() - breaking));
    Ok((out.join("\n"), breaking > 0))
}

fn read(source: &str) -> Result<Value, String> {
    let text = if source.starts_with("http://") || source.starts_with("https://") {
        let url = match source.trim_end_matches('/') {
            base if base.ends_with(".json") => base.to_string(),
            base => format!("{base}/openapi.json"),
        };
        let agent = crate::support::tls::http_agent(&url, None, Some(std::time::Duration::from_secs(30)))?;
        let mut answer = agent.get(&url).call().map_err(|e| format!("{url}: {e}"))?;
        if !answer.status().is_success() {
            return Err(format!("{url} answered {}", answer.status()));
        }
        answer.body_mut().read_to_string().map_err(|e| format!("{url}: {e}"))?
    } else {
        let path = Path::new(source);
        let file = if path.is_dir() {
            [lock::LOCK_FILE, "openapi.json"]
                .iter()
                .map(|name| path.join(name))
                .find(|p| p.is_file())
                .ok_or_else(|| format!("{source}: holds neither openapi.json nor {}", lock::LOCK_FILE))?
        } else {
            path.to_path_buf()
        };
        std::fs::read_to_string(&file).map_err(|e| format!("{}: {e}", file.display()))?
    };
    let doc: Value = serde_json::from_str(&text).map_err(|e| format!("{source}: not JSON: {e}"))?;
    if doc.get("openapi").is_none() {
        return Err(format!("{source}: not an OpenAPI document (no `openapi` member)"));
    }
    Ok(doc)
}
