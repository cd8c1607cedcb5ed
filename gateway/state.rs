//! What every handler shares.

use crate::catalog::Registry;
use crate::config::Config;
use crate::store::Store;
use std::sync::Arc;

pub struct AppState {
    pub config: Arc<Config>,
    pub store: Store,
    pub registry: Registry,
}

impl AppState {
    pub fn new(config: Arc<Config>, store: Store) -> Result<AppState, String> {
        let switches = store.model_switches().map_err(|e| e.to_string())?;
        Ok(AppState {
            config,
            store,
            registry: Registry::new(switches)?,
        })
    }
}
