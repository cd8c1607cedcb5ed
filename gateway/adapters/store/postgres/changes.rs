//! Changes other replicas make that this one caches: keys (the key cache) and model switches (the
//! registry). A replica that changes them announces it with `NOTIFY` in the same transaction; every replica
//! listens on a connection of its own and, when told, empties its key cache and wakes whoever waits in
//! [`Changes::next`]. A notice can be missed (while the listening connection is down, which also empties
//! the cache when it is back), so cached keys are read again once [`REREAD_EVERY`] old, and
//! [`Changes::next`] returns at the latest after it, for switches to be read again.

use crate::adapters::store::keys::KeyCache;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use tokio_postgres::AsyncMessage;

/// How stale anything another replica changed may be here, if its notice was missed.
pub(crate) const REREAD_EVERY: Duration = Duration::from_secs(1);
/// The channel changes are announced on.
pub(super) const CHANNEL: &str = "mediagate_changes";

#[derive(Clone)]
pub(super) struct Changes {
    heard: watch::Receiver<u64>,
}

impl Changes {
    /// Starts listening (on the current runtime: the database's), reconnecting whenever the connection drops.
    pub(super) fn listen(
        config: tokio_postgres::Config,
        tls: tokio_postgres_rustls::MakeRustlsConnect,
        keys: Arc<KeyCache>,
    ) -> Changes {
        let (told, heard) = watch::channel(0);
        tokio::spawn(async move {
            let mut delay = Duration::from_millis(250);
            loop {
                let listened = listen_once(&config, tls.clone(), &keys, &told).await;
                if told.is_closed() {
                    return;
                }
                if let Err(e) = listened {
                    tracing::warn!(error = %e, "lost the database connection that hears of changes; reconnecting");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(Duration::from_secs(5));
            }
        });
        Changes { heard }
    }

    /// Resolves when a change is announced, or after [`REREAD_EVERY`] at the latest.
    pub(super) async fn next(&self) {
        let mut heard = self.heard.clone();
        heard.mark_unchanged();
        let _ = tokio::time::timeout(REREAD_EVERY, heard.changed()).await;
    }
}

async fn listen_once(
    config: &tokio_postgres::Config,
    tls: tokio_postgres_rustls::MakeRustlsConnect,
    keys: &KeyCache,
    told: &watch::Sender<u64>,
) -> Result<(), tokio_postgres::Error> {
    let (client, mut connection) = config.connect(tls).await?;
    let (notices, mut heard) = mpsc::unbounded_channel();
    let driver = tokio::spawn(async move {
        while let Some(message) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let AsyncMessage::Notification(_) = message? {
                let _ = notices.send(());
            }
        }
        Ok::<(), tokio_postgres::Error>(())
    });
    client.batch_execute(&format!("LISTEN {CHANNEL}")).await?;
    // Whatever changed while nobody listened is read again.
    let announce = || {
        keys.invalidate();
        told.send_modify(|count| *count += 1);
    };
    announce();
    while heard.recv().await.is_some() {
        announce();
    }
    drop(client);
    driver.await.unwrap_or(Ok(()))
}
