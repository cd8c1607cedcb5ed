//! The lock of the published contract: `spec/published.lock.json` is the OpenAPI document (every model's
//! request schema, the task, acceptance and webhook shapes, the routes) as last published. The build
//! compares what the spec generates now with it ([`check`]): a breaking change fails unless
//! `spec/compatibility.yaml` records it as intended; a compatible one asks for the lock to be written again
//! (`mediagate schemas lock`), and a test fails until it is.

use crate::Spec;
use crate::compat::{self, Change, Severity};
use serde::Deserialize;
use serde_json::Value;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};

/// The lock's file name in the spec directory.
pub const LOCK_FILE: &str = "published.lock.json";
/// The intended breaks' file name in the spec directory.
pub const INTENDED_FILE: &str = "compatibility.yaml";

/// `spec/compatibility.yaml`.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntendedFile {
    #[serde(default)]
    intended_breaks: Vec<IntendedBreak>,
}

/// A breaking change made on purpose.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct IntendedBreak {
    /// The model id, shape or route, as the check names it.
    subject: String,
    /// The change, as the check words it (`duration: maximum narrowed from 15 to 10`).
    change: String,
    /// When it was decided, `YYYY-MM-DD`.
    date: String,
    /// Why, for the client teams reading the release notes.
    reason: String,
}

/// What the spec's contract is against the lock.
#[derive(Debug, Default)]
pub struct Verdict {
    /// Breaking changes nobody recorded as intended, each where in `spec/` it was made (if it can tell).
    pub breaking: Vec<(Change, Option<String>)>,
    /// Breaking changes `compatibility.yaml` records, with its date and reason.
    pub intended: Vec<(Change, String)>,
    pub compatible: Vec<Change>,
    /// No lock in the spec directory yet.
    pub unlocked: bool,
}

impl Verdict {
    /// The lock says what the spec says.
    pub fn current(&self) -> bool {
        !self.unlocked && self.breaking.is_empty() && self.intended.is_empty() && self.compatible.is_empty()
    }

    /// The build's failure: each unrecorded break, where, and what to do.
    pub fn report(&self) -> String {
        let mut out = String::new();
        for (change, at) in &self.breaking {
            let at = at.as_deref().unwrap_or("spec/");
            let _ = writeln!(out, "{at}: breaking change to the published contract: {change}");
        }
        let _ = writeln!(
            out,
            "Clients built on the published schemas would fail. Publish the change as a new model id beside the old \
             one (the spec's versioning), or, if it is meant, record it in spec/{INTENDED_FILE}:"
        );
        let _ = writeln!(out, "intended_breaks:");
        for (change, _) in &self.breaking {
            let _ = writeln!(
                out,
                "  - subject: {}\n    change: {}\n    date: YYYY-MM-DD\n    reason: …",
                yaml_string(&change.subject),
                yaml_string(&change.description())
            );
        }
        let _ = write!(out, "then run `mediagate schemas lock`.");
        out
    }
}

fn yaml_string(text: &str) -> String {
    serde_json::to_string(text).unwrap_or_default()
}

/// Compares the contract `spec` generates with the lock in `spec_dir`.
pub fn check(spec_dir: &Path, spec: &Spec) -> Result<Verdict, String> {
    let generated = crate::openapi::openapi(spec);
    let lock_path = spec_dir.join(LOCK_FILE);
    let lock: Value = match std::fs::read_to_string(&lock_path) {
        Ok(text) => serde_json::from_str(&text).map_err(|e| format!("{}: not valid JSON: {e}", lock_path.display()))?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Ok(Verdict { unlocked: true, ..Verdict::default() });
        }
        Err(e) => return Err(format!("{}: {e}", lock_path.display())),
    };
    let intended = intended(spec_dir)?;
    let mut verdict = Verdict::default();
    for change in compat::diff(&lock, &generated) {
        match change.severity {
            Severity::Compatible => verdict.compatible.push(change),
            Severity::Breaking => {
                match intended.iter().find(|i| i.subject == change.subject && i.change == change.description()) {
                    Some(entry) => verdict.intended.push((change, format!("{}: {}", entry.date, entry.reason))),
                    None => {
                        let at = locate(spec_dir, &change);
                        verdict.breaking.push((change, at));
                    }
                }
            }
        }
    }
    // A change of wording alone (a description) is no difference the classifier reports, yet the lock must
    // still say it: the published documents are what clients read.
    if verdict.current() && lock != generated {
        verdict.compatible.push(Change {
            severity: Severity::Compatible,
            subject: "contract".into(),
            field: String::new(),
            what: "descriptions or annotations changed".into(),
        });
    }
    Ok(verdict)
}

/// Writes the lock of what `spec` generates, unless a break is unrecorded.
pub fn write(spec_dir: &Path, spec: &Spec) -> Result<Verdict, String> {
    let verdict = check(spec_dir, spec)?;
    if !verdict.breaking.is_empty() {
        return Err(verdict.report());
    }
    let text = serde_json::to_string_pretty(&crate::openapi::openapi(spec)).map_err(|e| e.to_string())? + "\n";
    let path = spec_dir.join(LOCK_FILE);
    std::fs::write(&path, text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(verdict)
}

fn intended(spec_dir: &Path) -> Result<Vec<IntendedBreak>, String> {
    let path = spec_dir.join(INTENDED_FILE);
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(format!("{}: {e}", path.display())),
    };
    let file: IntendedFile = serde_saphyr::from_str(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    for entry in &file.intended_breaks {
        let valid = entry.date.len() == 10
            && entry.date.char_indices().all(|(i, c)| if i == 4 || i == 7 { c == '-' } else { c.is_ascii_digit() });
        if !valid {
            return Err(format!(
                "{}: the intended break of {} ({}) needs its date as YYYY-MM-DD, not `{}`",
                path.display(),
                entry.subject,
                entry.change,
                entry.date
            ));
        }
    }
    Ok(file.intended_breaks)
}

/// `file:line` in the spec where a change was made, as near as the files tell: the model's record, its
/// narrowing of the field, or the operation's field.
fn locate(spec_dir: &Path, change: &Change) -> Option<String> {
    let field = change.field.split(['.', '[', ' ']).next().unwrap_or_default();
    let models = files(&spec_dir.join("models"));
    for path in &models {
        let text = std::fs::read_to_string(path).ok()?;
        let lines: Vec<&str> = text.lines().collect();
        let Some(start) =
            lines.iter().position(|l| l.trim_start().strip_prefix("- id:").map(str::trim) == Some(&change.subject))
        else {
            continue;
        };
        let end = lines[start + 1..]
            .iter()
            .position(|l| l.trim_start().starts_with("- id:"))
            .map_or(lines.len(), |n| start + 1 + n);
        let record = &lines[start..end];
        let key = |l: &&str, name: &str| l.trim_start().strip_prefix(name).is_some_and(|rest| rest.starts_with(':'));
        if !field.is_empty()
            && let Some(n) = record.iter().position(|l| key(l, field))
        {
            return Some(format!("{}:{}", shown(spec_dir, path), start + n + 1));
        }
        let operation = record.iter().find_map(|l| l.trim_start().strip_prefix("operation:")).map(str::trim);
        if !field.is_empty()
            && let Some(op) = operation
        {
            let op_path = spec_dir.join("operations").join(format!("{op}.yaml"));
            if let Ok(op_text) = std::fs::read_to_string(&op_path)
                && let Some(n) = op_text.lines().position(|l| key(&l, field))
            {
                return Some(format!("{}:{}", shown(spec_dir, &op_path), n + 1));
            }
        }
        return Some(format!("{}:{}", shown(spec_dir, path), start + 1));
    }
    None
}

fn files(dir: &Path) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .collect();
    paths.sort();
    paths
}

/// `path` as `spec/…` when it lies in the spec directory.
fn shown(spec_dir: &Path, path: &Path) -> String {
    let name = spec_dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_else(|| "spec".into());
    match path.strip_prefix(spec_dir) {
        Ok(rest) => format!("{name}/{}", rest.display()),
        Err(_) => path.display().to_string(),
    }
}
