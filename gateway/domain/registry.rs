//! The models of the spec at run time: compiled validators and the operator's on/off switches.

use crate::domain::catalog::{MODELS, Media, ModelSpec};
use crate::domain::errors::{Code, Problem};
use crate::domain::validate::ModelValidator;
use std::collections::HashMap;
use std::sync::RwLock;

pub struct Registry {
    validators: HashMap<&'static str, ModelValidator>,
    /// Operator overrides of the spec's `enabled`, loaded from the store and updated by the admin API.
    switches: RwLock<HashMap<String, bool>>,
}

impl Registry {
    /// Compiles every model's schema; a schema that does not compile is a build defect, reported at start-up.
    pub fn new(switches: Vec<(String, bool)>) -> Result<Registry, String> {
        let validators = MODELS
            .iter()
            .map(|m| Ok((m.id, ModelValidator::compile(m)?)))
            .collect::<Result<HashMap<_, _>, String>>()?;
        Ok(Registry { validators, switches: RwLock::new(switches.into_iter().collect()) })
    }

    pub fn is_enabled(&self, model: &ModelSpec) -> bool {
        let switches = self.switches.read().unwrap_or_else(|e| e.into_inner());
        switches.get(model.id).copied().unwrap_or(model.enabled)
    }

    pub fn set_enabled(&self, model: &str, enabled: bool) {
        let mut switches = self.switches.write().unwrap_or_else(|e| e.into_inner());
        switches.insert(model.to_string(), enabled);
    }

    /// Takes every switch as stored (another replica may have flipped one).
    pub fn reload(&self, switches: Vec<(String, bool)>) {
        *self.switches.write().unwrap_or_else(|e| e.into_inner()) = switches.into_iter().collect();
    }

    /// Enabled models in spec order.
    pub fn enabled_models(&self) -> impl Iterator<Item = &'static ModelSpec> + '_ {
        MODELS.iter().filter(|m| self.is_enabled(m))
    }

    pub fn any_enabled(&self, media: Media) -> bool {
        self.enabled_models().any(|m| m.media == media)
    }

    /// The enabled model with this id, or the error a client should see.
    pub fn enabled(&self, id: &str) -> Result<&'static ModelSpec, Problem> {
        let model = ModelSpec::find(id).ok_or_else(|| {
            Problem::new(
                Code::model_not_found,
                format!("Model `{id}` does not exist; list models with GET /v1/models."),
            )
            .with_param("model")
        })?;
        if !self.is_enabled(model) {
            return Err(Problem::new(Code::model_disabled, format!("Model `{id}` is not enabled.")).with_param("model"));
        }
        Ok(model)
    }

    pub fn validator(&self, model: &ModelSpec) -> Result<&ModelValidator, Problem> {
        self.validators.get(model.id).ok_or_else(|| Problem::internal(format!("no validator for {}", model.id)))
    }
}
