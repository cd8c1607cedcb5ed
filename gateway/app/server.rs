//! Assembles and runs the gateway's HTTP server.

use crate::adapters::upstream::Upstreams;
use crate::app::config::Config;
use crate::ports::storage::Storage;
use crate::services::state::AppState;
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

/// The shared state for a config: the store opened, the catalog compiled, the upstreams checked.
pub async fn build_state(config: Config, upstreams: Upstreams) -> std::io::Result<web::Data<AppState>> {
    let store = open_store(&config).await.map_err(std::io::Error::other)?;
    let state = AppState::new(Arc::new(config), store, upstreams).await.map_err(std::io::Error::other)?;
    Ok(web::Data::new(state))
}

/// The store the config names: PostgreSQL at its database URL, else the embedded store in its data dir.
pub async fn open_store(config: &Config) -> Result<Arc<dyn Storage>, crate::ports::storage::StoreError> {
    match config.store.postgres(&config.limits) {
        Some(options) => Ok(Arc::new(crate::adapters::store::postgres::Store::connect(options).await?)),
        None => Ok(Arc::new(crate::adapters::store::embedded::Store::open(&config.data_dir)?)),
    }
}

/// Serves `state` on `listener` (plus any extra routes, e.g. the demo's simulator) until a shutdown
/// signal; in-flight requests finish first and in-flight tasks stay in the store for the next start.
pub async fn run(
    state: web::Data<AppState>,
    listener: std::net::TcpListener,
    extra: impl Fn(&mut web::ServiceConfig) + Clone + Send + 'static,
) -> std::io::Result<()> {
    let config = state.config.clone();
    actix_web::rt::spawn(crate::services::tasks::poller::run(state.clone()));
    actix_web::rt::spawn(crate::services::deliveries::run(state.clone()));
    actix_web::rt::spawn(crate::services::copies::run(state.clone()));
    actix_web::rt::spawn(follow_switches(state.clone()));
    actix_web::rt::spawn(crate::edges::console::activity::run());
    let app_state = state.clone();
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(middleware::from_fn(crate::edges::http::edge_middleware))
            .configure(extra.clone())
            .configure(crate::edges::http::configure(app_state.clone()))
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
async fn follow_switches(state: web::Data<AppState>) {
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
