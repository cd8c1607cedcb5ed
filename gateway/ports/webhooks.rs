//! The webhook port: how a delivery reaches its endpoint (`adapters::webhooks` posts it over HTTP).

#[async_trait::async_trait(?Send)]
pub trait WebhookSender: Send + Sync {
    /// Posts `body` with `headers` to `url`: the endpoint's status, or why it gave none.
    async fn post(&self, url: &str, headers: Vec<(&'static str, String)>, body: Vec<u8>) -> Result<u16, String>;
}
