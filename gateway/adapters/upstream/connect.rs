//! How one region's upstream is reached: TLS (verified against the region's trust), an optional HTTP
//! proxy tunnel, and a pool of kept-alive connections per worker thread, so that after warm-up no request
//! waits for a connection or a TLS handshake.

use actix_service::Service;
use actix_tls::connect::ConnectorService;
use actix_tls::connect::{ConnectError as TcpConnectError, ConnectInfo, Connection as TcpConnection};
use awc::http::Uri;
use futures_util::future::LocalBoxFuture;
use std::cell::RefCell;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// An idle connection is kept this long for the next call; a region's poller and submissions reuse it.
const KEEP_ALIVE: Duration = Duration::from_secs(60);
/// A connection is replaced after this long even when busy (so DNS changes are picked up): the one
/// handshake it costs is spread over every request it carried.
const LIFETIME: Duration = Duration::from_secs(30 * 60);
/// The longest answer head a proxy may send to a `CONNECT`.
const PROXY_HEAD_LIMIT: usize = 16 * 1024;

/// Everything needed to build a region's HTTP client on any thread (awc's client is not `Send`).
#[derive(Debug, Clone)]
pub struct Transport {
    region: &'static str,
    /// Present when the base URL is `https`.
    tls: Option<Arc<rustls::ClientConfig>>,
    proxy: Option<Arc<Proxy>>,
    /// This transport's place in each worker thread's client list.
    slot: usize,
}

/// An HTTP proxy reached with `CONNECT` (its address and an optional `Proxy-Authorization`).
#[derive(Debug)]
pub struct Proxy {
    address: Uri,
    authorization: Option<String>,
}

/// Where a region's proxy comes from: its own `proxy` setting, else the environment, else none.
#[derive(Debug, Clone, Copy)]
pub enum ProxyChoice<'a> {
    /// `HTTPS_PROXY` / `HTTP_PROXY` / `ALL_PROXY`, unless `NO_PROXY` names the host.
    FromEnvironment,
    /// A proxy URL the config names for this upstream.
    Configured(&'a str),
    /// Never a proxy (the demo's own loopback simulator).
    Direct,
}

static NEXT_SLOT: AtomicUsize = AtomicUsize::new(0);

thread_local! {
    /// One client per transport and worker thread, made on first use: each holds that thread's pool.
    static CLIENTS: RefCell<Vec<Option<awc::Client>>> = const { RefCell::new(Vec::new()) };
}

impl Transport {
    /// The transport to `base_url` for `region`, trusting the system's roots and `ca_file`. Refuses what
    /// it cannot honour (an `https` proxy, an unreadable CA file) rather than ignore it.
    pub fn new(
        region: &'static str,
        base_url: &str,
        ca_file: Option<&Path>,
        proxy: ProxyChoice<'_>,
    ) -> Result<Transport, String> {
        let target = base_url.parse::<http::Uri>().map_err(|e| format!("base URL: {e}"))?;
        let tls = match target.scheme_str() {
            Some("https") => Some(crate::support::tls::client_config(ca_file)?),
            Some("http") if ca_file.is_none() => None,
            Some("http") => return Err("`ca_file` is set but the base URL is not https".into()),
            _ => return Err("the base URL must start with http:// or https://".into()),
        };
        let proxy = match proxy {
            ProxyChoice::Direct => None,
            ProxyChoice::Configured(url) => {
                let matcher = hyper_util::client::proxy::matcher::Matcher::builder().all(url.to_string()).build();
                Some(Proxy::from_intercept(matcher.intercept(&target).ok_or("`proxy` is not a proxy URL")?)?)
            }
            ProxyChoice::FromEnvironment => {
                let matcher = hyper_util::client::proxy::matcher::Matcher::from_env();
                matcher.intercept(&target).map(Proxy::from_intercept).transpose()?
            }
        };
        let slot = NEXT_SLOT.fetch_add(1, Ordering::Relaxed);
        Ok(Transport { region, tls, proxy: proxy.map(Arc::new), slot })
    }

    /// This thread's client for the region.
    pub fn client(&self) -> awc::Client {
        CLIENTS.with(|clients| {
            let mut clients = clients.borrow_mut();
            if clients.len() <= self.slot {
                clients.resize(self.slot + 1, None);
            }
            clients[self.slot].get_or_insert_with(|| self.build_client()).clone()
        })
    }

    fn build_client(&self) -> awc::Client {
        let dialer = Dialer { tcp: ConnectorService::default(), proxy: self.proxy.clone(), region: self.region };
        let mut connector = awc::Connector::new().connector(dialer).conn_keep_alive(KEEP_ALIVE).conn_lifetime(LIFETIME);
        if let Some(tls) = &self.tls {
            connector = connector.rustls_0_23(tls.clone());
        }
        awc::Client::builder().connector(connector).disable_redirects().timeout(Duration::from_secs(120)).finish()
    }
}

impl Proxy {
    fn from_intercept(intercept: hyper_util::client::proxy::matcher::Intercept) -> Result<Proxy, String> {
        let uri = intercept.uri();
        if uri.scheme_str() != Some("http") {
            return Err(format!(
                "proxy scheme `{}` is not supported: name an http:// proxy (it tunnels TLS with CONNECT)",
                uri.scheme_str().unwrap_or_default()
            ));
        }
        let address = uri.to_string().parse::<Uri>().map_err(|e| format!("proxy URL: {e}"))?;
        let authorization = intercept.basic_auth().and_then(|value| value.to_str().ok()).map(String::from);
        Ok(Proxy { address, authorization })
    }

    /// Asks the proxy, on `stream`, for a tunnel to `host:port`; the stream then carries the upstream's bytes.
    async fn open_tunnel(&self, stream: &mut tokio::net::TcpStream, host: &str, port: u16) -> std::io::Result<()> {
        let authority = if host.contains(':') && !host.starts_with('[') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        let mut request = format!("CONNECT {authority} HTTP/1.1\r\nHost: {authority}\r\n");
        if let Some(authorization) = &self.authorization {
            request.push_str(&format!("Proxy-Authorization: {authorization}\r\n"));
        }
        request.push_str("\r\n");
        stream.write_all(request.as_bytes()).await?;
        // The upstream speaks only after our first bytes, so everything before that is the proxy's answer.
        let mut head = Vec::with_capacity(256);
        let mut chunk = [0u8; 1024];
        while memchr::memmem::find(&head, b"\r\n\r\n").is_none() {
            let read = stream.read(&mut chunk).await?;
            if read == 0 {
                return Err(proxy_error("the proxy closed the connection before answering CONNECT"));
            }
            head.extend_from_slice(&chunk[..read]);
            if head.len() > PROXY_HEAD_LIMIT {
                return Err(proxy_error("the proxy's answer to CONNECT is too long"));
            }
        }
        let status = head.split(|b| *b == b' ').nth(1).and_then(|s| std::str::from_utf8(s).ok()).unwrap_or("");
        match status {
            s if s.starts_with('2') && s.len() == 3 => Ok(()),
            "407" => Err(proxy_error("the proxy asks for authentication (407): put credentials in its URL")),
            other => Err(proxy_error(&format!("the proxy refused the tunnel ({other})"))),
        }
    }
}

fn proxy_error(message: &str) -> std::io::Error {
    std::io::Error::other(message.to_string())
}

/// awc's TCP step for a region: straight to the upstream or through the proxy's tunnel, counting each
/// connection opened (each one a TLS handshake on an `https` upstream).
#[derive(Clone)]
struct Dialer {
    tcp: ConnectorService,
    proxy: Option<Arc<Proxy>>,
    region: &'static str,
}

impl Service<ConnectInfo<Uri>> for Dialer {
    type Response = TcpConnection<Uri, tokio::net::TcpStream>;
    type Error = TcpConnectError;
    type Future = LocalBoxFuture<'static, Result<Self::Response, Self::Error>>;

    actix_service::always_ready!();

    fn call(&self, target: ConnectInfo<Uri>) -> Self::Future {
        let (tcp, proxy, region) = (self.tcp.clone(), self.proxy.clone(), self.region);
        Box::pin(async move {
            let connection = match proxy {
                None => tcp.call(target).await?,
                Some(proxy) => {
                    let (mut stream, _) = tcp.call(ConnectInfo::new(proxy.address.clone())).await?.into_parts();
                    proxy
                        .open_tunnel(&mut stream, target.hostname(), target.port())
                        .await
                        .map_err(TcpConnectError::Io)?;
                    TcpConnection::new(target.request().clone(), stream)
                }
            };
            crate::support::metrics::upstream_connection_opened(region);
            Ok(connection)
        })
    }
}
