//! Admission of a submission, before anything is priced or forwarded: the model exists and is enabled, its
//! operation belongs to this endpoint, the body passes the model's schema and rules, and it deserializes
//! into the operation's typed struct, which renders the upstream envelope.

use crate::domain::catalog::envelope::EnvelopeBuilder;
use crate::domain::catalog::{EndpointSpec, ModelSpec, OperationRequest};
use crate::domain::errors::{Code, Problem};
use crate::domain::registry::Registry;
use serde_json::{Map, Value};

/// A submission that passed every check.
#[derive(Debug)]
pub struct Admitted {
    pub model: &'static ModelSpec,
    /// The body with aliases folded and upstream-relevant defaults filled in.
    pub body: Map<String, Value>,
    pub request: OperationRequest,
    /// `{"model", "input", "parameters"}` for the upstream, as JSON text.
    pub envelope: bytes::Bytes,
}

/// Runs every check in order; the first failing stage answers.
pub fn admit(registry: &Registry, endpoint: &EndpointSpec, body: Value) -> Result<Admitted, Problem> {
    if !registry.any_enabled(endpoint.media) {
        return Err(Problem::new(
            Code::image_models_unavailable,
            format!("No {} model is enabled, so {} cannot generate right now.", endpoint.media.as_str(), endpoint.path),
        )
        .with_retry_after(60));
    }
    let Value::Object(mut body) = body else {
        return Err(Problem::new(Code::invalid_body, "The body must be a JSON object."));
    };
    let model_id = match body.get("model") {
        Some(Value::String(id)) => id.clone(),
        Some(_) => {
            return Err(Problem::invalid_parameter("model", "`model` must be a string."));
        }
        None => {
            return Err(Problem::new(Code::missing_model, "`model` is required.").with_param("model"));
        }
    };
    let model = registry.enabled(&model_id)?;
    if !endpoint.operations.contains(&model.operation) {
        return Err(Problem::new(
            Code::invalid_model_operation,
            format!(
                "Model `{}` is a `{}` model; send it to {} instead of {}.",
                model.id,
                model.operation.as_str(),
                model.endpoint().path,
                endpoint.path
            ),
        )
        .with_param("model"));
    }
    body.values_mut().for_each(integral_numbers_as_integers);
    registry.validator(model)?.validate(&mut body).map_err(Problem::invalid)?;
    for (field, default, send) in model.defaults {
        if *send && !body.contains_key(*field) {
            let value = serde_json::from_str(default).map_err(Problem::internal)?;
            body.insert((*field).to_string(), value);
        }
    }
    let request = OperationRequest::parse(model.operation, &body)
        .map_err(|e| Problem::new(Code::invalid_parameter, format!("Invalid request: {e}")))?;
    let mut envelope = EnvelopeBuilder::new(model);
    request.render(&mut envelope).map_err(|e| Problem::invalid_parameter(e.field, e.to_string()))?;
    Ok(Admitted { model, body, request, envelope: envelope.finish() })
}

/// JSON Schema counts `4.0` as an integer, so the published schemas accept it: the typed structs must
/// too. Every number with no fractional part is made an integer (safe for `number` fields, which read
/// integers as well).
fn integral_numbers_as_integers(value: &mut Value) {
    match value {
        Value::Number(n) if n.is_f64() => {
            if let Some(f) = n.as_f64().filter(|f| f.fract() == 0.0 && f.abs() < 9_007_199_254_740_992.0) {
                *value = Value::from(f as i64);
            }
        }
        Value::Array(items) => items.iter_mut().for_each(integral_numbers_as_integers),
        Value::Object(fields) => fields.values_mut().for_each(integral_numbers_as_integers),
        _ => {}
    }
}
