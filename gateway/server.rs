//! Assembles and runs the gateway's HTTP server.

use crate::config::Config;
use crate::state::AppState;
use crate::store::Store;
use actix_web::{App, HttpServer, middleware, web};
use std::sync::Arc;

/// Opens the store and serves until a shutdown signal; in-flight requests finish first.
pub async fn serve(config: Config) -> std::io::Result<()> {
    let state = build_state(config)?;
    run(state).await
}

/// The shared state for a config: the store opened, the catalog compiled.
pub fn build_state(config: Config) -> std::io::Result<web::Data<AppState>> {
    let store = Store::open(&config.data_dir).map_err(std::io::Error::other)?;
    let state = AppState::new(Arc::new(config), store).map_err(std::io::Error::other)?;
    Ok(web::Data::new(state))
}

/// Binds the configured address and serves.
pub async fn run(state: web::Data<AppState>) -> std::io::Result<()> {
    let config = state.config.clone();
    let app_state = state.clone();
    let mut server = HttpServer::new(move || {
        App::new()
            .wrap(middleware::from_fn(crate::http::request_id::middleware))
            .configure(crate::http::configure(app_state.clone()))
    })
    // Without TCP_NODELAY small responses wait for Nagle's algorithm (tens of ms at low rates).
    .on_connect(|conn, _| {
        if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
            let _ = tcp.set_nodelay(true);
        }
    })
    .shutdown_timeout(30);
    if config.workers > 0 {
        server = server.workers(config.workers);
    }
    let server = server.bind(config.listen)?;
    for addr in server.addrs() {
        tracing::info!(%addr, "mediagate listening");
        println!("mediagate listening on http://{addr}");
    }
    server.run().await
}
