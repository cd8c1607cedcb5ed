//! The layers hold: every import in `gateway/` points down the layers ARCHITECTURE.md draws, the modules of a
//! layer import each other without a cycle, and so do its files, a parent and its children included (a
//! `mod.rs` that a child imports from imports none of its children). Read from the source itself
//! (`use` lines and paths in code, comments left out), plus the paths the code generator writes into the
//! catalog, so a back-edge fails this test whatever file it is added in.
#![allow(clippy::unwrap_used)]

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, outermost first, and the layers each may import besides its own.
const LAYERS: &[(&str, &[&str])] = &[
    ("app", &["edges", "services", "adapters", "ports", "support", "domain"]),
    ("edges", &["services", "support", "domain"]),
    ("services", &["ports", "support", "domain"]),
    ("adapters", &["ports", "support", "domain"]),
    ("ports", &["domain"]),
    ("support", &["domain"]),
    ("domain", &[]),
];

/// Layers whose modules never import each other (the edges call use cases, never one another), but for
/// one module they all share, which imports none of them: the web edges' error answer and request id.
const APART: &[(&str, &str)] = &[("edges", "web")];

/// Crates (and the socket types) a layer may not name: the domain does no I/O and knows no framework;
/// below the edges no actix type is seen.
const FORBIDDEN_CRATES: &[(&str, &[&str])] = &[
    (
        "domain",
        &[
            "actix_web",
            "actix_rt",
            "awc",
            "tokio",
            "redb",
            "tokio_postgres",
            "object_store",
            "std::fs",
            "std::process",
            "TcpStream",
            "TcpListener",
            "UdpSocket",
        ],
    ),
    ("ports", &["actix_web", "actix_rt", "awc", "redb", "tokio_postgres", "object_store"]),
    ("services", &["actix_web", "actix_rt", "awc", "redb", "tokio_postgres", "object_store"]),
];

/// One Rust source file of the crate and the module path it defines (`domain::catalog::registry`).
struct Source {
    file: String,
    module: Vec<String>,
    text: String,
}

fn sources(root: &Path) -> Vec<Source> {
    let mut out = Vec::new();
    let mut stack = vec![root.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                let relative = path.strip_prefix(root).unwrap();
                let mut module: Vec<String> =
                    relative.with_extension("").iter().map(|s| s.to_string_lossy().into_owned()).collect();
                if module.last().is_some_and(|m| m == "mod" || m == "lib" || m == "main") {
                    module.pop();
                }
                let text = without_tests(&without_comments(&std::fs::read_to_string(&path).unwrap()));
                out.push(Source { file: format!("gateway/{}", relative.display()), module, text });
            }
        }
    }
    out.sort_by(|a, b| a.file.cmp(&b.file));
    out
}

/// The text with comments and string literals blanked, so neither a doc link nor a message counts as an
/// import.
fn without_comments(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = String::with_capacity(text.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i..].starts_with(b"//") {
            while i < bytes.len() && bytes[i] != b'\n' {
                i += 1;
            }
        } else if bytes[i..].starts_with(b"/*") {
            let end = text[i + 2..].find("*/").map_or(bytes.len(), |e| i + 2 + e + 2);
            i = end;
        } else if bytes[i] == b'"' {
            // A string: skipped to its closing quote (escapes included).
            i += 1;
            while i < bytes.len() && bytes[i] != b'"' {
                i += if bytes[i] == b'\\' { 2 } else { 1 };
            }
            i += 1;
            out.push_str("\"\"");
        } else if bytes[i..].starts_with(b"r#\"") {
            let end = text[i + 3..].find("\"#").map_or(bytes.len(), |e| i + 3 + e + 2);
            i = end;
            out.push_str("\"\"");
        } else if bytes[i] == b'\'' && i + 2 < bytes.len() && (bytes[i + 2] == b'\'' || bytes[i + 1] == b'\\') {
            // A char literal such as '"' or '\n'.
            let end = text[i + 1..].find('\'').map_or(bytes.len(), |e| i + 1 + e + 1);
            i = end.max(i + 3);
        } else {
            let ch = text[i..].chars().next().unwrap();
            out.push(ch);
            i += ch.len_utf8();
        }
    }
    out
}

/// The text without its `#[cfg(test)]` modules: a unit test may do what its layer may not (read a file).
fn without_tests(text: &str) -> String {
    let mut out = text.to_string();
    while let Some(at) = out.find("#[cfg(test)]") {
        let Some(open) = out[at..].find('{').map(|o| at + o) else { break };
        if !out[at..open].contains("mod ") {
            out.replace_range(at..at + "#[cfg(test)]".len(), "");
            continue;
        }
        let mut depth = 0;
        let mut end = out.len();
        for (i, ch) in out[open..].char_indices() {
            match ch {
                '{' => depth += 1,
                '}' => {
                    depth -= 1;
                    if depth == 0 {
                        end = open + i + 1;
                        break;
                    }
                }
                _ => {}
            }
        }
        out.replace_range(at..end, "");
    }
    out
}

/// Every path the text names: `crate::a::b`, `super::a`, `self::a`, and the first segments of `use`
/// trees (expanded: `use crate::a::{b, c::d}` names `a::b` and `a::c::d`).
fn paths(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    // `use` statements, with their brace trees expanded.
    let mut rest = text;
    while let Some(at) = rest.find("use ") {
        let before = rest[..at].chars().last();
        let statement_start = before.is_none_or(|c| !(c.is_alphanumeric() || c == '_'));
        rest = &rest[at + 4..];
        if !statement_start {
            continue;
        }
        let Some(end) = rest.find(';') else { break };
        let tree: String = rest[..end].split_whitespace().collect::<Vec<_>>().join(" ");
        expand("", &tree, &mut out);
        rest = &rest[end..];
    }
    // Paths in code.
    for root in ["crate::", "super::", "self::"] {
        let mut from = 0;
        while let Some(at) = text[from..].find(root) {
            let start = from + at;
            let before = text[..start].chars().last();
            from = start + root.len();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':') {
                continue;
            }
            let path: String =
                text[start..].chars().take_while(|c| c.is_alphanumeric() || *c == '_' || *c == ':').collect();
            out.push(path.trim_end_matches(':').to_string());
        }
    }
    out
}

/// Expands one `use` tree under `prefix`.
fn expand(prefix: &str, tree: &str, out: &mut Vec<String>) {
    let tree = tree.trim();
    let join = |rest: &str| if prefix.is_empty() { rest.to_string() } else { format!("{prefix}::{rest}") };
    if let Some(open) = tree.find('{') {
        let head = tree[..open].trim().trim_end_matches("::");
        let inner = &tree[open + 1..tree.rfind('}').unwrap_or(tree.len())];
        let base = join(head);
        let mut depth = 0;
        let mut item = String::new();
        for ch in inner.chars() {
            match ch {
                '{' => depth += 1,
                '}' => depth -= 1,
                _ => {}
            }
            if ch == ',' && depth == 0 {
                expand(&base, &item, out);
                item.clear();
            } else {
                item.push(ch);
            }
        }
        if !item.trim().is_empty() {
            expand(&base, &item, out);
        }
    } else {
        let name = tree.split(" as ").next().unwrap_or("").trim();
        if name == "self" {
            out.push(prefix.to_string());
        } else if !name.is_empty() && name != "*" {
            out.push(join(name));
        }
    }
}

/// The module a path names, as the crate's module path, or `None` for another crate.
fn resolve(from: &Source, path: &str, modules: &BTreeSet<Vec<String>>) -> Option<Vec<String>> {
    let mut segments: Vec<&str> = path.split("::").filter(|s| !s.is_empty()).collect();
    // A file's own module: `x.rs` is module `x`, and `super` is its parent.
    let mut base: Vec<String> = from.module.clone();
    match segments.first().copied() {
        Some("crate") => {
            base.clear();
            segments.remove(0);
        }
        Some("super") | Some("self") => {
            while let Some(first) = segments.first().copied() {
                match first {
                    "super" => {
                        base.pop();
                        segments.remove(0);
                    }
                    "self" => {
                        segments.remove(0);
                    }
                    _ => break,
                }
            }
        }
        Some(first) => {
            // A relative path names a child module of this one, or another crate.
            let mut child = base.clone();
            child.push(first.to_string());
            if !modules.contains(&child) {
                return None;
            }
        }
        None => return None,
    }
    // The longest module path the segments name.
    let mut module = base;
    for segment in segments {
        let mut next = module.clone();
        next.push(segment.to_string());
        if modules.contains(&next) {
            module = next;
        } else {
            break;
        }
    }
    Some(module)
}

fn layer_of(module: &[String]) -> Option<&str> {
    module.first().map(String::as_str).filter(|l| LAYERS.iter().any(|(name, _)| name == l))
}

/// Strongly connected groups of more than one node in `edges`.
fn cycles(edges: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let nodes: BTreeSet<String> = edges.keys().chain(edges.values().flatten()).cloned().collect();
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(node) = stack.pop() {
            for next in edges.get(&node).into_iter().flatten() {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<String, BTreeSet<String>> = nodes.iter().map(|n| (n.clone(), reach(n))).collect();
    let mut groups: Vec<Vec<String>> = Vec::new();
    let mut placed = BTreeSet::new();
    for node in &nodes {
        if placed.contains(node) || !reaches[node].contains(node) {
            continue;
        }
        let group: Vec<String> = nodes
            .iter()
            .filter(|other| reaches[node].contains(*other) && reaches[*other].contains(node))
            .cloned()
            .collect();
        placed.extend(group.iter().cloned());
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

/// Every edge of the crate: (file, its module, the module it names).
fn edges(root: &Path) -> Vec<(String, Vec<String>, Vec<String>)> {
    let sources = sources(root);
    let modules: BTreeSet<Vec<String>> = sources.iter().map(|s| s.module.clone()).collect();
    let mut out = Vec::new();
    for source in &sources {
        for path in paths(&source.text) {
            if let Some(target) = resolve(source, &path, &modules)
                && target != source.module
                && !target.is_empty()
            {
                out.push((source.file.clone(), source.module.clone(), target));
            }
        }
    }
    // What the generator writes into the catalog (`include!`d there) names modules too.
    let generator = root.parent().unwrap().join("codegen/src/rust.rs");
    let generated = without_comments(&std::fs::read_to_string(generator).unwrap());
    let catalog = sources.iter().find(|s| s.module == ["domain", "catalog"]).unwrap();
    for path in paths(&generated).into_iter().filter(|p| p.starts_with("crate::")) {
        if let Some(target) = resolve(catalog, &path, &modules) {
            out.push(("codegen/src/rust.rs (generated into domain::catalog)".into(), catalog.module.clone(), target));
        }
    }
    out.sort();
    out.dedup();
    out
}

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("gateway")
}

/// What breaks the rules in the crate at `root`: each as `file -> module: why`.
fn violations(root: &Path) -> Vec<String> {
    let all = edges(root);
    let mut found = Vec::new();
    // Layers: only down.
    for (file, from, to) in &all {
        let (Some(from_layer), Some(to_layer)) = (layer_of(from), layer_of(to)) else { continue };
        let allowed =
            from_layer == to_layer || LAYERS.iter().any(|(l, below)| *l == from_layer && below.contains(&to_layer));
        if !allowed {
            found.push(format!("{file} -> {}: {from_layer} may not import {to_layer}", to.join("::")));
        }
        let apart = APART.iter().any(|(layer, shared)| {
            *layer == from_layer
                && to.get(1).is_some_and(|unit| unit != shared || from.get(1).is_some_and(|u| u == shared))
        });
        if from_layer == to_layer && apart && from.get(1) != to.get(1) {
            found.push(format!("{file} -> {}: the {from_layer} do not import each other", to.join("::")));
        }
    }
    // Modules of one layer, and files of one module: no cycle.
    let mut units: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    let mut files: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, from, to) in &all {
        if from.len() >= 2 && to.len() >= 2 && from[0] == to[0] && from[1] != to[1] {
            units.entry(from[..2].join("::")).or_default().insert(to[..2].join("::"));
        }
        // Siblings: two modules of one parent, neither the parent itself.
        if from.len() == to.len() && from.len() >= 2 && from[..from.len() - 1] == to[..to.len() - 1] {
            files.entry(from.join("::")).or_default().insert(to.join("::"));
        }
    }
    for group in cycles(&units) {
        found.push(format!("modules import each other in a circle: {}", group.join(", ")));
    }
    for group in cycles(&files) {
        found.push(format!("sibling modules import each other in a circle: {}", group.join(", ")));
    }
    // Any modules of a layer, a parent and its children included: no circle, so each file can be read
    // knowing only what it imports.
    let mut modules: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (_, from, to) in &all {
        if from.first() == to.first() {
            modules.entry(from.join("::")).or_default().insert(to.join("::"));
        }
    }
    for group in cycles(&modules) {
        found.push(format!("files import each other in a circle: {}", group.join(", ")));
    }
    // Crates a layer may not name.
    for source in sources(root) {
        let Some(layer) = layer_of(&source.module) else { continue };
        for (forbidden_in, crates) in FORBIDDEN_CRATES {
            if *forbidden_in != layer {
                continue;
            }
            for krate in *crates {
                let named = source.text.match_indices(krate).any(|(at, _)| {
                    let before = source.text[..at].chars().last();
                    let after = &source.text[at + krate.len()..];
                    before.is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == ':'))
                        && !after.starts_with(|c: char| c.is_alphanumeric() || c == '_')
                });
                if named {
                    found.push(format!("{} -> {krate}: the {layer} layer does not use {krate}", source.file));
                }
            }
        }
    }
    found.sort();
    found.dedup();
    found
}

#[test]
fn imports_point_down_the_layers_without_cycles() {
    let found = violations(&root());
    let listed: Vec<String> = found.iter().map(|v| format!("  {v}")).collect();
    assert!(found.is_empty(), "imports against the layers (ARCHITECTURE.md):\n{}", listed.join("\n"));
}

/// The check itself, on a small crate laid out in a temporary directory: a back-edge, a circle between two
/// modules of a layer, a parent and a child that import each other, and a framework in the domain are each
/// found; the same crate without them is clean.
#[test]
fn the_check_finds_a_back_edge_a_circle_and_a_framework_in_the_domain() {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("gateway");
    let write = |path: &str, text: &str| {
        let path = root.join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("lib.rs", "pub mod domain;\npub mod services;\npub mod edges;\n");
    write("domain/mod.rs", "pub mod catalog;\npub mod billing;\n");
    write("domain/catalog/mod.rs", "// crate::edges::http is named in a comment only\npub struct Model;\n");
    write("domain/billing.rs", "use crate::domain::catalog::Model;\npub fn price(_: &Model) {}\n");
    write("services/mod.rs", "pub mod submit;\n");
    write(
        "services/submit.rs",
        "use crate::domain::billing;\npub fn run() { billing::price(&crate::domain::catalog::Model) }\n",
    );
    write("edges/mod.rs", "pub mod http;\npub mod console;\n");
    write("edges/http.rs", "pub fn serve() { crate::services::submit::run() }\n");
    write("edges/console.rs", "pub fn page() { crate::services::submit::run() }\n");
    // `violations` also reads the generator beside the crate: give the temporary crate one.
    write("../codegen/src/rust.rs", "fn generate() -> TokenStream { quote! { use crate::domain::catalog::Model; } }\n");
    assert_eq!(violations(&root), Vec::<String>::new());

    write(
        "domain/billing.rs",
        "use crate::domain::catalog::Model;\nuse crate::services::submit;\npub fn price(_: &Model) {}\n",
    );
    write("domain/catalog/mod.rs", "pub struct Model;\npub fn of() { let _ = crate::domain::billing::price; }\n");
    write("edges/console.rs", "pub fn page() { crate::edges::http::serve() }\n");
    write(
        "domain/catalog/mod.rs",
        "pub struct Model;\npub fn of() { crate::domain::billing::price(&Model); tokio::spawn(async {}); }\n",
    );
    write("services/mod.rs", "pub mod submit;\npub struct Gateway;\npub fn start() { self::submit::run() }\n");
    write(
        "services/submit.rs",
        "use crate::domain::billing;\nuse super::Gateway;\npub fn run() { billing::price(&crate::domain::catalog::Model) }\n",
    );
    let found = violations(&root);
    let expected = [
        "gateway/domain/billing.rs -> services::submit: domain may not import services",
        "gateway/domain/catalog/mod.rs -> tokio: the domain layer does not use tokio",
        "gateway/edges/console.rs -> edges::http: the edges do not import each other",
        "modules import each other in a circle: domain::billing, domain::catalog",
        "files import each other in a circle: services, services::submit",
    ];
    for line in expected {
        assert!(found.iter().any(|f| f == line), "{line} not in {found:#?}");
    }
}
