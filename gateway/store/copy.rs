//! `mediagate store copy`: moves an embedded store into PostgreSQL, for a gateway going from one node to
//! several. Both ledgers are verified: the source before anything is written, the target after.

use super::{Storage, StoreError, embedded, postgres};
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
}

/// Copies the (stopped) embedded store in `data_dir` into the empty database `to` names.
pub async fn copy(data_dir: &Path, to: postgres::Options) -> Result<Copied, StoreError> {
    let source = embedded::Store::open(data_dir)?;
    let before = source.verify_ledger()?;
    if !before.problems.is_empty() {
        return Err(StoreError::new(format!("the source's ledger does not verify: {:?}", before.problems)));
    }
    let export = source.export()?;
    source.close()?;
    let copied = Copied {
        accounts: export.accounts.len(),
        keys: export.keys.len(),
        entries: export.entries.len() as u64,
        tasks: export.tasks.len(),
        idempotency_records: export.idempotency.len(),
    };
    let target = postgres::Store::connect(to).await?;
    target.import(export).await?;
    let after = Storage::verify_ledger(&target).await;
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
