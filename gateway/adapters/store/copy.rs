//! `mediagate store copy`: moves an embedded store into PostgreSQL, for a gateway going from one node to
//! several. Both ledgers are verified: the source before anything is written, the target after.

use super::{embedded, postgres};
use crate::ports::storage::{Ledger, Lifecycle, StoreError};
use serde::Serialize;
use std::path::Path;

/// What was copied.
#[derive(Debug, Serialize)]
pub struct Copied {
    pub accounts: usize,
    pub keys: usize,
    pub entries: u64,
    pub tasks: usize,
    pub idempotency_records: usize,
    /// Whether the link secret came too (then result links made before still work).
    pub link_secret: bool,
}

/// Copies the (stopped) embedded store in `data_dir` into the empty database `to` names.
pub async fn copy(data_dir: &Path, to: postgres::Options) -> Result<Copied, StoreError> {
    let source = embedded::Store::open(data_dir)?;
    let before = Ledger::verify_ledger(&source).await?;
    if !before.problems.is_empty() {
        return Err(StoreError::new(format!("the source's ledger does not verify: {:?}", before.problems)));
    }
    let export = source.export()?;
    Lifecycle::close(&source).await?;
    let mut copied = Copied {
        accounts: export.accounts.len(),
        keys: export.keys.len(),
        entries: export.entries.len() as u64,
        tasks: export.tasks.len(),
        idempotency_records: export.idempotency.len(),
        link_secret: false,
    };
    let link_secret = super::kept_link_secret(data_dir).map_err(StoreError::new)?;
    let target = postgres::Store::connect(to).await?;
    target.import(export).await?;
    if let Some(secret) = link_secret {
        // A replica started on the database before the copy made a secret of its own, which stays.
        let kept = target.shared_secret(super::LINK_SECRET, secret.clone()).await?;
        copied.link_secret = kept == Some(secret);
    }
    let after = Ledger::verify_ledger(&target).await;
    target.close().await?;
    let after = after?;
    if !after.problems.is_empty() || after.entries != before.entries {
        return Err(StoreError::new(format!(
            "the copy's ledger does not verify ({} entries of {}): {:?}",
            after.entries, before.entries, after.problems
        )));
    }
    Ok(copied)
}
