//! Reads `spec/` from disk and checks it for consistency.
//!
//! Every problem is reported as `file:line:column: message`, so a bad spec fails the build pointing at the
//! line to fix.

use crate::spec::{EndpointsFile, Field, Limit, Model, ModelsFile, Operation, Rule, Slot, UpstreamFile};
use serde_saphyr::Spanned;
use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// One problem in the spec, located in its file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError {
    pub file: PathBuf,
    pub line: u64,
    pub column: u64,
    pub message: String,
}

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}:{}: {}", self.file.display(), self.line, self.column, self.message)
    }
}

/// All problems found; the build prints every one of them.
#[derive(Debug)]
pub struct SpecErrors(pub Vec<SpecError>);

impl fmt::Display for SpecErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for error in &self.0 {
            writeln!(f, "{error}")?;
        }
        Ok(())
    }
}

impl std::error::Error for SpecErrors {}

/// The whole spec, loaded and checked.
#[derive(Debug)]
pub struct Spec {
    pub endpoints: EndpointsFile,
    pub upstream: UpstreamFile,
    /// Operation name -> its definition, in name order.
    pub operations: BTreeMap<String, Operation>,
    /// Models in file order (files sorted by name).
    pub models: Vec<Model>,
    /// Every file read, for `cargo:rerun-if-changed`.
    pub files: Vec<PathBuf>,
}

impl Spec {
    /// Reads and checks the spec under `dir`.
    pub fn load(dir: &Path) -> Result<Spec, SpecErrors> {
        let mut errors = Vec::new();
        let mut files = Vec::new();
        let endpoints_path = dir.join("endpoints.yaml");
        let upstream_path = dir.join("upstream.yaml");
        let endpoints = read_yaml::<EndpointsFile>(&endpoints_path, &mut files);
        let upstream = read_yaml::<UpstreamFile>(&upstream_path, &mut files);
        let mut operations = BTreeMap::new();
        let mut operation_files = BTreeMap::new();
        for path in yaml_files(&dir.join("operations"), &mut errors) {
            match read_yaml::<Operation>(&path, &mut files) {
                Ok(op) => {
                    let stem = path.file_stem().and_then(|s| s.to_str()).unwrap_or_default();
                    if stem != op.operation {
                        errors.push(at(
                            &path,
                            1,
                            format!("operation `{}` must live in operations/{}.yaml", op.operation, op.operation),
                        ));
                    }
                    operation_files.insert(op.operation.clone(), path.clone());
                    operations.insert(op.operation.clone(), op);
                }
                Err(e) => errors.push(e),
            }
        }
        let mut models = Vec::new();
        let mut model_files = Vec::new();
        for path in yaml_files(&dir.join("models"), &mut errors) {
            match read_yaml::<ModelsFile>(&path, &mut files) {
                Ok(file) => {
                    for model in file.models {
                        model_files.push(path.clone());
                        models.push(model);
                    }
                }
                Err(e) => errors.push(e),
            }
        }
        let (endpoints, upstream) = match (endpoints, upstream) {
            (Ok(e), Ok(u)) => (e, u),
            (e, u) => {
                errors.extend(e.err());
                errors.extend(u.err());
                return Err(SpecErrors(errors));
            }
        };
        for (name, op) in operations.iter_mut() {
            for (field, spec) in &endpoints.submission_fields {
                if op.fields.insert(field.clone(), spec.clone()).is_some() {
                    errors.push(at(
                        &operation_files[name],
                        1,
                        format!("field `{field}` is a submission field of every operation (endpoints.yaml)"),
                    ));
                }
            }
        }
        let spec = Spec { endpoints, upstream, operations, models, files };
        let mut check = Checker { spec: &spec, errors };
        check.endpoints(&endpoints_path);
        check.upstream(&upstream_path);
        for (name, op) in &spec.operations {
            check.operation(&operation_files[name], op);
        }
        check.models(&model_files);
        if check.errors.is_empty() { Ok(spec) } else { Err(SpecErrors(check.errors)) }
    }

    /// The endpoint that accepts `operation`.
    pub fn endpoint_of(&self, operation: &str) -> Option<&crate::spec::Endpoint> {
        self.endpoints.endpoints.iter().find(|e| e.operations.iter().any(|o| o.value == operation))
    }

    /// Every field an operation (including all of its variants) knows.
    pub fn all_fields<'a>(&'a self, op: &'a Operation) -> BTreeMap<&'a str, &'a Field> {
        let mut all: BTreeMap<&str, &Field> = op.fields.iter().map(|(k, v)| (k.as_str(), v)).collect();
        if let Some(variants) = &op.variants {
            for case in variants.cases.values() {
                all.extend(case.fields.iter().map(|(k, v)| (k.as_str(), v)));
            }
        }
        all
    }
}

fn at(file: &Path, line: u64, message: String) -> SpecError {
    SpecError { file: file.to_path_buf(), line, column: 1, message }
}

fn spanned_at<T>(file: &Path, span: &Spanned<T>, message: String) -> SpecError {
    SpecError { file: file.to_path_buf(), line: span.referenced.line(), column: span.referenced.column(), message }
}

fn yaml_files(dir: &Path, errors: &mut Vec<SpecError>) -> Vec<PathBuf> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(entries) => entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
            .collect(),
        Err(e) => {
            errors.push(at(dir, 0, format!("cannot read directory: {e}")));
            Vec::new()
        }
    };
    paths.sort();
    paths
}

fn read_yaml<T: serde::de::DeserializeOwned>(path: &Path, files: &mut Vec<PathBuf>) -> Result<T, SpecError> {
    files.push(path.to_path_buf());
    let text = std::fs::read_to_string(path).map_err(|e| at(path, 0, format!("cannot read: {e}")))?;
    serde_saphyr::from_str(&text).map_err(|e| {
        let (line, column) = e.location().map_or((0, 0), |l| (l.line(), l.column()));
        let message = e.to_string().lines().next().unwrap_or_default().to_string();
        SpecError { file: path.to_path_buf(), line, column, message }
    })
}

struct Checker<'a> {
    spec: &'a Spec,
    errors: Vec<SpecError>,
}

impl Checker<'_> {
    fn endpoints(&mut self, path: &Path) {
        let mut seen = BTreeSet::new();
        for endpoint in &self.spec.endpoints.endpoints {
            if !(200..=202).contains(&endpoint.async_status) {
                self.errors.push(at(
                    path,
                    1,
                    format!("endpoint `{}`: async_status must be 200, 201 or 202", endpoint.name),
                ));
            }
            for op in &endpoint.operations {
                if !seen.insert(op.value.clone()) {
                    self.errors.push(spanned_at(
                        path,
                        op,
                        format!("operation `{}` is listed on more than one endpoint", op.value),
                    ));
                }
                if !self.spec.operations.contains_key(&op.value) {
                    self.errors.push(spanned_at(
                        path,
                        op,
                        format!("unknown operation `{}` (no spec/operations/{}.yaml)", op.value, op.value),
                    ));
                }
            }
        }
        for name in self.spec.operations.keys() {
            if !seen.contains(name) {
                self.errors.push(at(path, 1, format!("operation `{name}` is on no endpoint")));
            }
        }
    }

    fn upstream(&mut self, path: &Path) {
        let wire = &self.spec.upstream.wire;
        let root = &wire.api_root;
        if !root.value.starts_with('/') || root.value.ends_with('/') || root.value.contains(['?', '#', ' ']) {
            self.errors.push(spanned_at(
                path,
                root,
                "`api_root` must start with `/`, not end with one, and be a plain path".into(),
            ));
        }
        for header in [&wire.async_header, &wire.data_inspection_header] {
            let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
            if header.name.value.is_empty() || !header.name.value.chars().all(token) {
                self.errors.push(spanned_at(
                    path,
                    &header.name,
                    format!("`{}` is not a header name", header.name.value),
                ));
            }
            if !header.value.value.chars().all(|c| c == ' ' || c.is_ascii_graphic()) {
                self.errors.push(spanned_at(path, &header.value, "a header value must be printable ASCII".into()));
            }
        }
        for (name, route) in &self.spec.upstream.routes {
            for region in &route.regions {
                if !self.spec.upstream.regions.contains_key(&region.value) {
                    self.errors.push(spanned_at(
                        path,
                        region,
                        format!("route `{name}`: unknown region `{}`", region.value),
                    ));
                }
            }
        }
    }

    fn operation(&mut self, path: &Path, op: &Operation) {
        let media_of_endpoint = self.spec.endpoint_of(&op.operation).map(|e| e.media);
        if media_of_endpoint.is_some_and(|m| m != op.media) {
            self.errors.push(at(
                path,
                1,
                format!("operation `{}` is {:?} but its endpoint is not", op.operation, op.media),
            ));
        }
        if !op.fields.contains_key("model") {
            self.errors.push(at(path, 1, "every operation needs a `model` field".into()));
        }
        let all = self.spec.all_fields(op);
        for (name, field) in &all {
            self.field(path, name, field, true);
        }
        let mut names: BTreeSet<&str> = all.keys().copied().collect();
        for field in all.values() {
            for alias in &field.aliases {
                if !names.insert(alias) {
                    self.errors.push(at(path, 1, format!("alias `{alias}` collides with another field or alias")));
                }
            }
        }
        let common: BTreeSet<&str> = op.fields.keys().map(String::as_str).collect();
        self.rules(path, &op.rules, &common);
        if let Some(variants) = &op.variants {
            if op.fields.contains_key(&variants.tag) {
                self.errors.push(at(path, 1, format!("variant tag `{}` must not also be a field", variants.tag)));
            }
            for (case, variant) in &variants.cases {
                let mut known = common.clone();
                known.extend(variant.fields.keys().map(String::as_str));
                for name in variant.fields.keys() {
                    if common.contains(name.as_str()) {
                        self.errors.push(at(path, 1, format!("variant `{case}` redefines common field `{name}`")));
                    }
                }
                self.rules(path, &variant.rules, &known);
            }
        }
    }

    fn field(&mut self, path: &Path, name: &str, field: &Field, top: bool) {
        if field.ty.is_none() && field.enumeration.is_none() {
            self.errors.push(at(path, 1, format!("field `{name}` needs a `type`")));
        }
        if top && field.upstream.is_none() {
            self.errors.push(at(path, 1, format!("field `{name}` needs `upstream: {{to: ...}}`")));
        }
        if let Some(placement) = &field.upstream
            && placement.to == Slot::None
            && placement.name.is_some()
        {
            self.errors.push(at(path, 1, format!("field `{name}` is not sent upstream but names an upstream name")));
        }
        if let Some(items) = &field.items {
            self.field(path, &format!("{name}[]"), items, false);
        }
        for (member, inner) in &field.properties {
            self.field(path, &format!("{name}.{member}"), inner, false);
        }
    }

    fn rules(&mut self, path: &Path, rules: &[Rule], known: &BTreeSet<&str>) {
        for rule in rules {
            let mut named: Vec<&String> = rule.require.iter().chain(&rule.forbid).chain(rule.equal.keys()).collect();
            named.extend(rule.any_of.iter().chain(&rule.at_most_one_of).chain(&rule.same_length));
            if let Some(when) = &rule.when {
                named.extend(when.present.iter().chain(&when.absent).chain(&when.field));
                let conditions = [when.present.is_some(), when.absent.is_some(), when.field.is_some()];
                if conditions.iter().filter(|c| **c).count() != 1 || when.field.is_some() != when.equals.is_some() {
                    self.errors.push(at(
                        path,
                        1,
                        format!(
                            "rule `{}`: `when` takes exactly one of `present`, `absent` or `field` + `equals`",
                            rule.description
                        ),
                    ));
                }
            }
            for name in named {
                if !known.contains(name.as_str()) {
                    self.errors.push(at(path, 1, format!("rule `{}` names unknown field `{name}`", rule.description)));
                }
            }
        }
    }

    fn models(&mut self, files: &[PathBuf]) {
        let mut ids: BTreeMap<&str, &Spanned<String>> = BTreeMap::new();
        for (model, path) in self.spec.models.iter().zip(files) {
            if let Some(first) = ids.insert(&model.id.value, &model.id) {
                self.errors.push(spanned_at(
                    path,
                    &model.id,
                    format!(
                        "duplicate model id `{}` (first defined at line {})",
                        model.id.value,
                        first.referenced.line()
                    ),
                ));
            }
            self.model(path, model);
        }
    }

    fn model(&mut self, path: &Path, model: &Model) {
        let id = &model.id.value;
        let Some(op) = self.spec.operations.get(&model.operation.value) else {
            self.errors.push(spanned_at(
                path,
                &model.operation,
                format!("model `{id}`: unknown operation `{}`", model.operation.value),
            ));
            return;
        };
        if op.media != model.media {
            self.errors.push(spanned_at(
                path,
                &model.id,
                format!(
                    "model `{id}`: type {:?} does not match operation `{}` ({:?})",
                    model.media, op.operation, op.media
                ),
            ));
        }
        if !self.spec.upstream.regions.contains_key(&model.region.value) {
            self.errors.push(spanned_at(
                path,
                &model.region,
                format!("model `{id}`: unknown region `{}`", model.region.value),
            ));
        }
        match self.spec.upstream.routes.get(&model.route.value) {
            None => self.errors.push(spanned_at(
                path,
                &model.route,
                format!("model `{id}`: unknown upstream route `{}`", model.route.value),
            )),
            Some(route) => {
                if !route.regions.iter().any(|r| r.value == model.region.value) {
                    self.errors.push(spanned_at(
                        path,
                        &model.region,
                        format!(
                            "model `{id}`: region `{}` has no upstream route `{}`",
                            model.region.value, model.route.value
                        ),
                    ));
                }
                if route.mode != model.task_mode {
                    self.errors.push(spanned_at(
                        path,
                        &model.route,
                        format!(
                            "model `{id}`: task_mode {:?} but route `{}` is {:?}",
                            model.task_mode, model.route.value, route.mode
                        ),
                    ));
                }
            }
        }
        let fields = self.spec.all_fields(op);
        for (name, limit) in &model.limits {
            match fields.get(name.as_str()) {
                None => self.errors.push(spanned_at(
                    path,
                    &model.id,
                    format!("model `{id}`: limit on `{name}`, a field operation `{}` does not have", op.operation),
                )),
                Some(field) => self.limit(path, model, name, field, limit),
            }
        }
        for name in model.transforms.keys() {
            if !fields.contains_key(name.as_str()) {
                self.errors.push(spanned_at(
                    path,
                    &model.id,
                    format!("model `{id}`: transform on `{name}`, a field operation `{}` does not have", op.operation),
                ));
            }
        }
        let billing = &model.billing;
        let bases = [
            billing.per_second.is_some(),
            billing.per_image.is_some(),
            billing.per_call.is_some(),
            billing.per_token.is_some(),
        ];
        if bases.iter().filter(|b| **b).count() != 1 {
            self.errors.push(spanned_at(
                path,
                &model.id,
                format!("model `{id}`: billing needs exactly one of per_second, per_image, per_call, per_token"),
            ));
        }
        for tier in billing.per_second.iter().flat_map(|t| t.keys()) {
            if !self.spec.upstream.sizes.contains_key(tier) {
                self.errors.push(spanned_at(
                    path,
                    &model.id,
                    format!("model `{id}`: unknown resolution tier `{tier}`"),
                ));
            }
        }
    }

    fn limit(&mut self, path: &Path, model: &Model, name: &str, field: &Field, limit: &Limit) {
        let id = &model.id.value;
        if let (Some(narrow), Some(wide)) = (&limit.enumeration, &field.enumeration) {
            for value in narrow {
                if !wide.contains(value) {
                    self.errors.push(spanned_at(
                        path,
                        &model.id,
                        format!("model `{id}`: `{name}` value {value} is not among the operation's values"),
                    ));
                }
            }
        }
        if limit.forbidden && limit.required {
            self.errors.push(spanned_at(
                path,
                &model.id,
                format!("model `{id}`: `{name}` cannot be both forbidden and required"),
            ));
        }
    }
}
