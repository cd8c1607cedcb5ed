//! Quoting a job: what a submission would cost and who would pay, checked exactly as a submission is
//! (the same admission and the same errors) but never stored, held or forwarded.

use crate::domain::admission::admit;
use crate::domain::billing::books::{self, Pot};
use crate::domain::billing::pricing::{self, Units};
use crate::domain::catalog::{ENDPOINTS, EndpointSpec};
use crate::domain::errors::{Code, Problem};
use crate::services::errors::ServiceError;
use crate::services::runtime::Gateway;
use serde::Serialize;
use serde_json::Value;

/// What a job would cost an account now.
#[derive(Debug, Serialize)]
pub struct Quote {
    pub model: &'static str,
    pub endpoint: &'static str,
    /// The list price, in micro-units: what is held at submission, and the most a settlement charges.
    pub amount: i64,
    pub units: Units,
    /// Only the free-trial grant may pay for this model.
    pub free_trial_only: bool,
    /// The pots that would pay, in funding order, and how much each.
    pub funding: Vec<Funding>,
    /// Whether the account's pots cover `amount` now (tasks in flight's holds set aside).
    pub fundable: bool,
    /// What the pots cannot cover; 0 when fundable.
    pub short_by: i64,
}

#[derive(Debug, Serialize)]
pub struct Funding {
    pub pot: Pot,
    pub amount: i64,
}

/// The submit route a quote is for: `path` if given (one of the submit routes), else the model's own.
pub fn endpoint(path: Option<&str>) -> Result<Option<&'static EndpointSpec>, Problem> {
    let Some(path) = path else { return Ok(None) };
    ENDPOINTS.iter().find(|e| e.path == path).map(Some).ok_or_else(|| {
        let known: Vec<&str> = ENDPOINTS.iter().map(|e| e.path).collect();
        Problem::invalid_parameter(
            "endpoint",
            format!("`{path}` is not a submit route; use one of {}.", known.join(", ")),
        )
    })
}

/// Quotes `body` for `account`, as a submission to `endpoint` (the model's own when `None`) would be
/// admitted.
pub async fn quote(
    state: &Gateway,
    account: &str,
    endpoint: Option<&'static EndpointSpec>,
    body: Value,
) -> Result<Quote, ServiceError> {
    let endpoint = match endpoint {
        Some(endpoint) => endpoint,
        None => {
            let model = body
                .get("model")
                .and_then(Value::as_str)
                .ok_or_else(|| Problem::new(Code::missing_model, "`model` is required.").with_param("model"))?;
            state.registry.enabled(model)?.endpoint()
        }
    };
    let admitted = admit(&state.registry, endpoint, body)?;
    crate::services::submit::callback_url(state, account, &admitted).await?;
    let model = admitted.model;
    let (amount, units) = pricing::quote(model, &admitted.body);
    let funds = state.store.funds(account).await?;
    let (split, short_by) = books::funding(&funds, amount, model.free_trial_only);
    Ok(Quote {
        model: model.id,
        endpoint: endpoint.path,
        amount,
        units,
        free_trial_only: model.free_trial_only,
        funding: split.into_iter().map(|(pot, amount)| Funding { pot, amount }).collect(),
        fundable: short_by == 0,
        short_by,
    })
}
