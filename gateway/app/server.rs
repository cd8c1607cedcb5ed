//! Assembles and runs the gateway's HTTP server.

use crate::adapters::store::{LINK_SECRET, kept_link_secret};
use crate::adapters::upstream::Upstreams;
use crate::app::config::Config;
use crate::ports::storage::Storage;
use crate::services::runtime::operators::Operators;
use crate::services::runtime::settings::Settings;
use crate::services::runtime::{Gateway, Parts};
use actix_web::{App, HttpServer, middleware, web};
use std::sync::Arc;

/// Threads each runtime (the system's, each HTTP worker's) keeps for blocking work: result copies written to
/// or read from a local directory, host name lookups, the embedded store's admin writes. Each costs memory for
/// as long as it lives, and tokio's default lets hundreds start, one per file operation under way; a few keep
/// the disk as busy.
const BLOCKING_THREADS: usize = 4;

/// The actix system the gateway's background work (poller, copies, deliveries) runs on.
pub fn system() -> actix_web::rt::SystemRunner {
    actix_web::rt::System::with_tokio_rt(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .max_blocking_threads(BLOCKING_THREADS)
            .build()
            .expect("a tokio runtime for the actix system")
    })
}

/// A gateway wired from its config: the use cases on their ports, and what the edges keep of their own.
pub struct Wired {
    pub gateway: Arc<Gateway>,
    pub config: Arc<Config>,
    /// The console's sessions, signed under a key derived from the link secret.
    pub sessions: Arc<crate::edges::console::Sessions>,
}

/// Wires a gateway for `config`: the store opened, the catalog compiled, the upstreams checked, result copies
/// and their links, the settings the use cases read.
pub async fn wire(config: Config, upstreams: Upstreams) -> std::io::Result<Wired> {
    fn io(error: impl ToString) -> std::io::Error {
        std::io::Error::other(error.to_string())
    }
    let store = open_store(&config).await.map_err(io)?;
    // One secret signs result links and, under a key derived from it, console sessions.
    let secret = link_secret(&config.results.link_secret_env, &config.data_dir, &*store).await.map_err(io)?;
    let results = &config.results;
    let files = Arc::new(crate::adapters::files::Files::new(&files_config(&config)).map_err(io)?);
    let base = results.public_url.clone().unwrap_or_else(|| public_url(&config, config.listen));
    let links = crate::services::runtime::links::Links::new(&base, &secret).map_err(io)?;
    let copies = crate::services::runtime::copies::Copies::new(files, links, results.mirror, results.retention_days);
    // Cookies are `Secure` where browsers reach the gateway over HTTPS: its own TLS, or a public URL behind a
    // proxy that terminates it.
    let secure = config.tls.is_some() || results.public_url.as_deref().is_some_and(|u| u.starts_with("https://"));
    let sessions = Arc::new(crate::edges::console::Sessions::new(&secret, secure).map_err(io)?);
    let admin_token = config.admin_token.clone().or_else(|| std::env::var(&config.admin_token_env).ok());
    let settings = Settings {
        poller: config.poller.clone(),
        limits: config.limits.clone(),
        webhooks: config.webhooks.clone(),
        billing: config.billing.clone(),
        max_task_seconds: config.max_task_seconds,
        transient_retries: config.transient_retries,
        shared_upstream_slots: config.shared_upstream_slots,
        copy_retry_delays_ms: results.retry_delays_ms.clone(),
        retention: config.retention.policy(),
    };
    let parts = Parts {
        store,
        upstream: Arc::new(upstreams),
        webhooks: Arc::new(crate::adapters::webhooks::Sender::new(config.webhooks.allow_private_callbacks)),
        copies,
        operators: Operators::new(admin_token),
        settings,
        finished_task_cache_bytes: config.finished_task_cache_bytes,
    };
    let gateway = Arc::new(crate::services::startup::start(parts).await.map_err(io)?);
    Ok(Wired { gateway, config: Arc::new(config), sessions })
}

/// Where result copies go, as the config says.
fn files_config(config: &Config) -> crate::adapters::files::FilesConfig {
    let results = &config.results;
    if results.s3.is_none() && config.store.url.is_some() && results.dir.is_none() {
        tracing::warn!(
            "result copies are kept in this replica's data dir, where other replicas cannot serve them: \
             set results.s3, or results.dir to a directory every replica mounts"
        );
    }
    crate::adapters::files::FilesConfig {
        dir: results.dir.clone().unwrap_or_else(|| config.data_dir.join("results")),
        s3: results.s3.clone(),
    }
}

/// The store the config names: PostgreSQL at its database URL, else the embedded store in its data dir.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Storage>, crate::ports::storage::StoreError> {
    match config.store.postgres(&config.limits) {
        Some(options) => Ok(Arc::new(crate::adapters::store::postgres::Store::connect(options).await?)),
        None => Ok(Arc::new(crate::adapters::store::embedded::Store::open(&config.data_dir)?)),
    }
}

/// Serves the wired gateway on `listener` (plus any extra routes, e.g. the demo's simulator) until a shutdown
/// signal; in-flight requests finish first and in-flight tasks stay in the store for the next start.
pub async fn run(
    wired: Wired,
    listener: std::net::TcpListener,
    extra: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
) -> std::io::Result<()> {
    let Wired { gateway: state, config, sessions } = wired;
    tokio::task::spawn_local(crate::services::tasks::poller::run(state.clone()));
    tokio::task::spawn_local(crate::services::tasks::dispatch::run(state.clone()));
    tokio::task::spawn_local(crate::services::deliveries::run(state.clone()));
    tokio::task::spawn_local(crate::services::copies::run(state.clone()));
    tokio::task::spawn_local(crate::services::retention::run(state.clone()));
    tokio::task::spawn_local(follow_switches(state.clone()));
    tokio::task::spawn_local(crate::edges::console::activity::run());
    let (app_state, max_body_bytes) = (web::Data::from(state.clone()), config.max_body_bytes);
    let sessions = web::Data::from(sessions);
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(middleware::from_fn(crate::edges::http::edge_middleware))
            .configure(extra.clone())
            .app_data(sessions.clone())
            .configure(crate::edges::http::configure(app_state.clone(), max_body_bytes))
            .configure(crate::edges::console::configure)
    })
    .on_connect(crate::edges::http::peer::on_connect)
    .worker_max_blocking_threads(BLOCKING_THREADS)
    .shutdown_timeout(30);
    if config.workers > 0 {
        server = server.workers(config.workers);
    }
    let server = match &config.tls {
        Some(tls) => {
            let tls =
                crate::support::tls::server_config(&tls.cert_file, &tls.key_file).map_err(std::io::Error::other)?;
            server.listen_rustls_0_23(listener, tls)?
        }
        None => server.listen(listener)?,
    };
    let server = server.run();
    // A store that can no longer make writes durable stops the gateway: it exits non-zero, for its
    // supervisor to restart it, and the restart replays the log (see ARCHITECTURE.md).
    let (handle, store) = (server.handle(), state.store.clone());
    actix_web::rt::spawn(async move {
        store.broken().await;
        tracing::error!("the store can no longer make writes durable: the gateway stops, to be restarted");
        handle.stop(true).await;
    });
    let served = server.await;
    if !state.store.writable() {
        return Err(std::io::Error::other("stopped: the store could not make writes durable (is the disk full?)"));
    }
    // The process may exit before every handle to the store is dropped: close it now (the embedded store
    // leaves a file that opens fast; a replica gives up its leases, for the others to claim at once).
    if let Err(e) = state.store.close().await {
        tracing::error!(error = %e, "could not close the store");
    }
    served
}

/// Model switches flipped by another replica sharing the store take effect here too.
async fn follow_switches(state: Arc<Gateway>) {
    loop {
        state.store.changed().await;
        match state.store.model_switches().await {
            Ok(switches) => state.registry.reload(switches),
            Err(e) => tracing::debug!(error = %e, "could not read the model switches again"),
        }
    }
}

/// The address clients reach the listener at.
pub fn public_url(config: &Config, addr: std::net::SocketAddr) -> String {
    format!("{}://{addr}", if config.tls.is_some() { "https" } else { "http" })
}

/// Binds the configured address.
pub fn bind(config: &Config) -> std::io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(config.listen)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

/// Bytes of a link secret made on first start.
const SECRET_BYTES: usize = 32;

/// The link secret: the environment variable's value if set; else, on a store shared by replicas, the one
/// kept there (the first replica's); else the one kept in `data_dir`, made (with owner-only permissions) on
/// first start.
pub async fn link_secret(env: &str, data_dir: &std::path::Path, store: &dyn Storage) -> Result<Vec<u8>, String> {
    if let Ok(value) = std::env::var(env)
        && !value.is_empty()
    {
        return Ok(value.into_bytes());
    }
    if let Some(shared) = store.shared_secret(LINK_SECRET, made()).await.map_err(|e| e.to_string())? {
        return Ok(shared);
    }
    if let Some(kept) = kept_link_secret(data_dir)? {
        return Ok(kept);
    }
    let path = data_dir.join(LINK_SECRET);
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let secret = made();
    std::fs::create_dir_all(data_dir).map_err(|e| format!("{}: {e}", data_dir.display()))?;
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&path)
        .map_err(|e| format!("{}: {e}", path.display()))?;
    file.write_all(&secret).and_then(|()| file.sync_all()).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(secret)
}

/// A new secret: random bytes, in hex.
fn made() -> Vec<u8> {
    use rand::RngCore;
    let mut bytes = [0u8; SECRET_BYTES];
    rand::rng().fill_bytes(&mut bytes);
    hex::encode(bytes).into_bytes()
}
