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
                "Model `{}` does `{}`, which is served at {}; send it there instead of {}.",
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
    let style = model.style();
    let mut envelope = EnvelopeBuilder::new(&style);
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

#[cfg(test)]
#[allow(clippy::unwrap_used)]
mod tests {
    use super::admit;
    use crate::domain::catalog::ModelSpec;
    use crate::domain::registry::Registry;
    use serde_json::json;

    /// What a client reads when a request is refused: the field, and what it must be, in its own terms.
    #[test]
    fn refusals_say_what_is_wrong_in_the_clients_terms() {
        let registry = Registry::new(Vec::new()).unwrap();
        let table = [
            (
                json!({"model": "alpha2.6-t2v_t2v", "prompt": "x", "audio": false}),
                "audio",
                "`audio` can only be true with model `alpha2.6-t2v_t2v`",
            ),
            (
                json!({"model": "alpha2.6-t2v_t2v", "prompt": "x", "callback_url": "ftp://a.example/x"}),
                "callback_url",
                "`callback_url` is not in its form: an http:// or https:// URL",
            ),
            (
                json!({"model": "alpha2.6-t2i", "prompt": "x", "size": "big"}),
                "size",
                "`size` is not in its form: `<width>*<height>` in pixels",
            ),
            (
                json!({"model": "alpha2.6-i2v_i2v", "image_url": "https://m.example/a.png", "resolution": "4K"}),
                "resolution",
                "`resolution` must be one of \"720P\", \"1080P\"",
            ),
        ];
        for (body, field, says) in table {
            let endpoint = ModelSpec::find(body["model"].as_str().unwrap()).unwrap().endpoint();
            let refused = admit(&registry, endpoint, body.clone()).err().unwrap();
            let violation =
                refused.violations.iter().find(|v| v.param == field).unwrap_or_else(|| panic!("{body}: {refused:?}"));
            assert!(violation.message.starts_with(says), "{body}: {}", violation.message);
        }
        let outpaint = ModelSpec::find("image-out-painting_outpaint").unwrap();
        let t2i = ModelSpec::find("beta-image-2.0-pro_t2i").unwrap().endpoint();
        let refused = admit(&registry, t2i, json!({"model": outpaint.id, "prompt": "x"})).err().unwrap();
        assert_eq!(
            refused.message,
            "Model `image-out-painting_outpaint` does `outpaint`, which is served at /v1/images/edits; send it there instead of /v1/images/generations."
        );
    }
}
