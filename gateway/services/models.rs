//! The models as clients and operators see them: a record's public view and its pricing rule, and an
//! operator's switch that turns a model on or off on every replica.

use crate::domain::audit::Actor;
use crate::domain::catalog::{BillingRule, ModelSpec};
use crate::domain::errors::{Code, Problem};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use serde_json::{Value, json};

/// The public view of a model record.
pub fn describe(model: &ModelSpec) -> Value {
    let limits: Value = serde_json::from_str(model.limits_json).unwrap_or_else(|_| json!({}));
    let billing = match model.billing {
        BillingRule::PerSecond { .. } => "per_second",
        BillingRule::PerImage { .. } => "per_image",
        BillingRule::PerCall { .. } => "per_call",
        BillingRule::PerToken { .. } => "per_token",
    };
    json!({
        "id": model.id,
        "object": "model",
        "created": 0,
        "owned_by": "mediagate",
        "type": model.media.as_str(),
        "operation": model.operation.as_str(),
        "endpoint": model.endpoint().path,
        "task_mode": model.task_mode.as_str(),
        "region": model.region,
        "summary": model.summary,
        "free_trial_only": model.free_trial_only,
        "schema_version": model.schema_version,
        "billing_basis": billing,
        "limits": limits,
    })
}

/// A model's pricing rule as the back office sees it (micro-units).
pub fn billing_rule(model: &ModelSpec) -> Value {
    match model.billing {
        BillingRule::PerSecond { placeholder, tiers } => {
            let tiers: serde_json::Map<String, Value> =
                tiers.iter().map(|t| (t.tier.to_string(), json!({"audio": t.audio, "silent": t.silent}))).collect();
            json!({"basis": "per_second", "placeholder": placeholder, "tiers": tiers})
        }
        BillingRule::PerImage { placeholder, price } => {
            json!({"basis": "per_image", "placeholder": placeholder, "price": price})
        }
        BillingRule::PerCall { placeholder, price } => {
            json!({"basis": "per_call", "placeholder": placeholder, "price": price})
        }
        BillingRule::PerToken { placeholder, price } => json!({
            "basis": "per_token", "placeholder": placeholder,
            "input_per_million": price.input_per_million, "output_per_million": price.output_per_million,
        }),
    }
}

/// Switches a model `enable` or `disable` (the word of the admin route and the console's form), on every
/// replica; its id and whether it is now enabled.
pub async fn switch_model(
    state: &Gateway,
    model: &str,
    switch: &str,
    by: &Actor,
) -> Result<(&'static str, bool), ServiceError> {
    let enabled = match switch {
        "enable" => true,
        "disable" => false,
        _ => return Err(Problem::new(Code::not_found, "Use /enable or /disable.").into()),
    };
    Ok((set_model_enabled(state, model, enabled, by).await?, enabled))
}

/// Switches a model on or off, on every replica; its id.
async fn set_model_enabled(
    state: &Gateway,
    model: &str,
    enabled: bool,
    by: &Actor,
) -> Result<&'static str, ServiceError> {
    let spec = crate::domain::catalog::ModelSpec::find(model)
        .ok_or_else(|| Problem::new(Code::model_not_found, format!("No model `{model}`.")).with_param("model"))?;
    state.store.set_model_switch(spec.id, enabled, by).await?;
    state.registry.set_enabled(spec.id, enabled);
    Ok(spec.id)
}
