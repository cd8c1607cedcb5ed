//! The cross-field rules of `spec/operations/*.yaml` (`rules:`), checked with messages that name the field.

use super::violation::Violation;
use crate::domain::catalog::OperationSpec;
use serde::Deserialize;
use serde_json::{Map, Value};
use std::collections::BTreeMap;

#[derive(Debug, Deserialize)]
struct Table {
    #[serde(default)]
    common: Vec<Rule>,
    #[serde(default)]
    variants: BTreeMap<String, Vec<Rule>>,
}

#[derive(Debug, Deserialize)]
struct Rule {
    description: String,
    when: Option<Condition>,
    #[serde(default)]
    require: Vec<String>,
    #[serde(default)]
    forbid: Vec<String>,
    #[serde(default)]
    equal: BTreeMap<String, Value>,
    #[serde(default)]
    any_of: Vec<String>,
    #[serde(default)]
    at_most_one_of: Vec<String>,
    #[serde(default)]
    same_length: Vec<String>,
}

#[derive(Debug, Deserialize)]
struct Condition {
    present: Option<String>,
    absent: Option<String>,
    field: Option<String>,
    equals: Option<Value>,
}

/// An operation's rules, parsed once.
#[derive(Debug)]
pub struct RuleSet(Table);

impl RuleSet {
    pub fn parse(op: &OperationSpec) -> Result<RuleSet, serde_json::Error> {
        serde_json::from_str(op.rules_json).map(RuleSet)
    }

    /// Every broken rule of the common part and of the variant `tag` selects.
    pub fn check(&self, body: &Map<String, Value>, tag: Option<&str>) -> Vec<Violation> {
        let variant = tag.and_then(|t| self.0.variants.get(t)).into_iter().flatten();
        self.0.common.iter().chain(variant).flat_map(|rule| rule.check(body)).collect()
    }
}

impl Rule {
    fn check(&self, body: &Map<String, Value>) -> Vec<Violation> {
        let present = |name: &str| body.get(name).is_some_and(|v| !v.is_null());
        let applies = match &self.when {
            None => true,
            Some(Condition { present: Some(f), .. }) => present(f),
            Some(Condition { absent: Some(f), .. }) => !present(f),
            Some(Condition { field: Some(f), equals: Some(v), .. }) => body.get(f) == Some(v),
            Some(_) => false,
        };
        if !applies {
            return Vec::new();
        }
        let why = &self.description;
        let mut out = Vec::new();
        for name in self.require.iter().filter(|n| !present(n)) {
            out.push(Violation::new(name, format!("`{name}` is required here: {why}")));
        }
        for name in self.forbid.iter().filter(|n| present(n)) {
            out.push(Violation::new(name, format!("`{name}` is not allowed here: {why}")));
        }
        for (name, value) in &self.equal {
            if body.get(name) != Some(value) {
                out.push(Violation::new(name, format!("`{name}` must be {value} here: {why}")));
            }
        }
        if !self.any_of.is_empty() && !self.any_of.iter().any(|n| present(n)) {
            let names = self.any_of.join("`, `");
            out.push(Violation::new(&self.any_of[0], format!("send at least one of `{names}`: {why}")));
        }
        let given: Vec<&String> = self.at_most_one_of.iter().filter(|n| present(n)).collect();
        if given.len() > 1 {
            let names = given.iter().map(|n| n.as_str()).collect::<Vec<_>>().join("`, `");
            out.push(Violation::new(given[1].as_str(), format!("send only one of `{names}`: {why}")));
        }
        let lengths: Vec<(&String, usize)> =
            self.same_length.iter().filter_map(|n| Some((n, body.get(n)?.as_array()?.len()))).collect();
        if lengths.len() > 1 && lengths.iter().any(|(_, l)| *l != lengths[0].1) {
            let (name, len) = lengths[1];
            out.push(Violation::new(
                name,
                format!("`{name}` has {len} items but `{}` has {}: {why}", lengths[0].0, lengths[0].1),
            ));
        }
        out
    }
}
