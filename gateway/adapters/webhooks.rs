//! Webhook deliveries over HTTP(S) (awc), implementing the webhook port: each endpoint's host resolved
//! again as a delivery connects and refused if it is internal, so a name that was public when it was
//! checked cannot be pointed inside later (DNS rebinding).

use crate::domain::addresses::first_internal;
use crate::ports::webhooks::WebhookSender;
use std::net::SocketAddr;
use std::time::Duration;

/// An endpoint that has not answered after this long has failed the attempt.
const ANSWER_WITHIN: Duration = Duration::from_secs(15);
/// Longest a delivery waits for its endpoint's host to resolve.
const RESOLVE_WITHIN: Duration = Duration::from_secs(5);

/// Posts deliveries; refuses internal endpoints unless `allow_private`.
pub struct Sender {
    allow_private: bool,
}

impl Sender {
    pub fn new(allow_private: bool) -> Sender {
        Sender { allow_private }
    }

    /// This thread's client (awc's are not shared between threads).
    fn client(&self) -> awc::Client {
        thread_local! {
            static CLIENTS: std::cell::RefCell<Vec<(bool, awc::Client)>> = const { std::cell::RefCell::new(Vec::new()) };
        }
        CLIENTS.with_borrow_mut(|clients| {
            if let Some((_, client)) = clients.iter().find(|(allow, _)| *allow == self.allow_private) {
                return client.clone();
            }
            let client = client(self.allow_private);
            clients.push((self.allow_private, client.clone()));
            client
        })
    }
}

#[async_trait::async_trait(?Send)]
impl WebhookSender for Sender {
    async fn post(&self, url: &str, headers: Vec<(&'static str, String)>, body: Vec<u8>) -> Result<u16, String> {
        let mut request = self.client().post(url);
        for header in headers {
            request = request.insert_header(header);
        }
        let response = request.send_body(body).await.map_err(|e| format!("no answer: {e}"))?;
        Ok(response.status().as_u16())
    }
}

fn client(allow_private: bool) -> awc::Client {
    let resolver = actix_tls::connect::Resolver::custom(GuardedResolver { allow_private });
    let mut connector = awc::Connector::new().connector(actix_tls::connect::Connector::new(resolver).service());
    match crate::support::tls::client_config(None) {
        Ok(tls) => connector = connector.rustls_0_23(tls),
        Err(e) => tracing::warn!(error = %e, "no trusted certificates: https endpoints cannot be reached"),
    }
    awc::Client::builder().connector(connector).disable_redirects().timeout(ANSWER_WITHIN).finish()
}

/// Resolves the hosts deliveries go to, refusing internal addresses as a submission's check does, at the moment of
/// connecting: a name that resolved to a public address when it was checked cannot be pointed inside
/// afterwards (DNS rebinding).
struct GuardedResolver {
    allow_private: bool,
}

impl actix_tls::connect::Resolve for GuardedResolver {
    fn lookup<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> futures_util::future::LocalBoxFuture<'a, Result<Vec<SocketAddr>, Box<dyn std::error::Error>>> {
        Box::pin(async move {
            let resolved = tokio::time::timeout(RESOLVE_WITHIN, tokio::net::lookup_host((host, port))).await;
            let addresses: Vec<SocketAddr> =
                resolved.map_err(|_| format!("{host} did not resolve within 5 s"))??.collect();
            if !self.allow_private
                && let Some(ip) = first_internal(&addresses)
            {
                return Err(format!("{host} resolves to {ip}, an internal address").into());
            }
            Ok(addresses)
        })
    }
}
