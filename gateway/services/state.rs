//! What every handler shares.

use crate::adapters::upstream::Upstreams;
use crate::app::config::Config;
use crate::domain::registry::Registry;
use crate::ports::storage::Storage;
use crate::services::limits::Limits;
use crate::services::tasks::answers::FinishedAnswers;
use crate::services::tasks::poller::Poller;
use std::sync::Arc;

pub struct AppState {
    pub config: Arc<Config>,
    pub store: Arc<dyn Storage>,
    pub registry: Registry,
    pub upstreams: Upstreams,
    pub poller: Poller,
    pub limits: Limits,
    /// Answers of finished task reads, kept rendered.
    pub finished: FinishedAnswers,
    /// Result copies and the links that serve them.
    pub mirroring: crate::services::copies::Mirroring,
    /// The console's sessions, signed under a key derived from the link secret.
    pub console: crate::edges::console::Sessions,
    /// The admin API's token (`admin_token_env`, or the config's own); the admin API is off without one.
    pub admin_token: Option<String>,
    /// When this process opened the store (epoch ms): a live task created before it and never forwarded
    /// was cut short by the last process.
    pub started_ms: i64,
}

impl AppState {
    pub async fn new(config: Arc<Config>, store: Arc<dyn Storage>, upstreams: Upstreams) -> Result<AppState, String> {
        let switches = store.model_switches().await.map_err(|e| e.to_string())?;
        // Read once: the tasks this process polls from now on (every live one, on a store it owns alone,
        // which its in-flight slots start from too; a store shared by replicas keeps the limits itself).
        let claimed = store.claim().await.map_err(|e| e.to_string())?;
        let limits = Limits::new(&config.limits, !store.keeps_limits());
        limits.restore(claimed.iter().map(|t| t.account.clone()));
        let poller = Poller::new(claimed);
        let finished = FinishedAnswers::new(config.finished_task_cache_bytes);
        // One secret signs result links and, under a key derived from it, console sessions.
        let secret =
            crate::services::copies::links::secret(&config.results.link_secret_env, &config.data_dir, &*store).await?;
        let mirroring = crate::services::copies::Mirroring::from_config(&config, &secret)?;
        let console = crate::edges::console::Sessions::new(&secret)?;
        let started_ms = crate::domain::clock::now_ms();
        let admin_token = config.admin_token.clone().or_else(|| std::env::var(&config.admin_token_env).ok());
        let admin_token = admin_token.filter(|token| !token.is_empty());
        Ok(AppState {
            config,
            store,
            registry: Registry::new(switches)?,
            upstreams,
            poller,
            limits,
            finished,
            mirroring,
            console,
            admin_token,
            started_ms,
        })
    }
}
