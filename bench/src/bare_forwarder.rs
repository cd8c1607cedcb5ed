//! The floor of the sync lane: an actix-web + awc forwarder of the same request with nothing else (no auth,
//! no validation, no billing, no store). `bare-forwarder LISTEN UPSTREAM_URL UPSTREAM_KEY`; an `https`
//! upstream is verified as the gateway verifies its own (system roots, `SSL_CERT_FILE`).

use actix_web::{App, HttpResponse, HttpServer, web};
use std::time::Duration;

/// The TLS configuration for an `https` upstream, set once before the workers start.
static TLS: std::sync::OnceLock<std::sync::Arc<rustls::ClientConfig>> = std::sync::OnceLock::new();

thread_local! {
    static CLIENT: awc::Client = {
        let mut connector = awc::Connector::new();
        if let Some(tls) = TLS.get() {
            connector = connector.rustls_0_23(tls.clone());
        }
        awc::Client::builder().connector(connector).timeout(Duration::from_secs(30)).finish()
    };
}

struct Target {
    url: String,
    auth: String,
}

async fn forward(target: web::Data<Target>, body: web::Bytes) -> HttpResponse {
    let request = CLIENT.with(|c| c.post(&target.url)).insert_header(("Authorization", target.auth.as_str()));
    match request.content_type("application/json").send_body(body).await {
        Ok(mut response) => {
            let status = response.status();
            match response.body().await {
                Ok(bytes) => HttpResponse::build(status).content_type("application/json").body(bytes),
                Err(_) => HttpResponse::BadGateway().finish(),
            }
        }
        Err(_) => HttpResponse::BadGateway().finish(),
    }
}

/// The same allocator as the gateway, so the floor differs from it only in what the gateway does.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    let [_, listen, url, key] = args.as_slice() else {
        eprintln!("usage: bare-forwarder LISTEN UPSTREAM_URL UPSTREAM_KEY");
        std::process::exit(2);
    };
    if url.starts_with("https://") {
        let tls = mediagate::support::tls::client_config(None).unwrap_or_else(|e| panic!("TLS: {e}"));
        let _ = TLS.set(tls);
    }
    let target = web::Data::new(Target { url: url.clone(), auth: format!("Bearer {key}") });
    actix_web::rt::System::new().block_on(
        HttpServer::new(move || App::new().app_data(target.clone()).route("/forward", web::post().to(forward)))
            .workers(1)
            .on_connect(|conn, _| {
                if let Some(tcp) = conn.downcast_ref::<actix_web::rt::net::TcpStream>() {
                    let _ = tcp.set_nodelay(true);
                }
            })
            .bind(listen.as_str())?
            .run(),
    )
}
