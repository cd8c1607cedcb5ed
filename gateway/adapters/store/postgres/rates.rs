//! Each API key's request rate, counted across replicas. A replica takes permits for the current second from
//! the database in small batches (`key_rates`, one row per key and second) and spends them in memory, so a
//! request rarely waits for the database, the replicas together never pass the limit, and what they hold
//! unspent (a batch each at most) stays within a tenth of it.

use super::db_error;
use crate::ports::storage::StoreError;
use deadpool_postgres::Object;
use std::collections::HashMap;
use std::sync::Mutex;

/// Permits held for one key in one second.
#[derive(Clone, Copy)]
struct Window {
    second: i64,
    left: u32,
}

#[derive(Default)]
pub(super) struct Rates {
    windows: Mutex<HashMap<[u8; 32], Window>>,
}

impl Rates {
    /// Spends a permit held for `key` in `second`; `None` when none is held (ask the database).
    pub(super) fn spend(&self, key: &[u8; 32], second: i64) -> Option<()> {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        let window = windows.get_mut(key).filter(|w| w.second == second && w.left > 0)?;
        window.left -= 1;
        Some(())
    }

    /// Keeps `granted` permits for `key` in `second`, one of them spent now; false when none was granted.
    pub(super) fn keep(&self, key: [u8; 32], second: i64, granted: u32) -> bool {
        let mut windows = self.windows.lock().unwrap_or_else(|e| e.into_inner());
        if windows.len() > 100_000 {
            windows.retain(|_, w| w.second >= second);
        }
        let window = windows.entry(key).or_insert(Window { second, left: 0 });
        if window.second != second {
            *window = Window { second, left: 0 };
        }
        window.left += granted;
        if window.left == 0 {
            return false;
        }
        window.left -= 1;
        true
    }
}

/// Takes up to `batch` of the key's `per_second` permits for `second` from the database; how many it got.
pub(super) async fn take(
    client: &mut Object,
    key: &[u8; 32],
    second: i64,
    batch: u32,
    per_second: u32,
) -> Result<u32, StoreError> {
    let tx = client.transaction().await.map_err(db_error)?;
    let key = key.as_slice();
    let counted = tx
        .prepare_cached(
            "INSERT INTO key_rates (hash, second, used) VALUES ($1, $2, 0) ON CONFLICT (hash, second) \
             DO UPDATE SET used = key_rates.used RETURNING used",
        )
        .await
        .map_err(db_error)?;
    let used: i32 = tx.query_one(&counted, &[&key, &second]).await.map_err(db_error)?.get(0);
    let granted = batch.min(per_second.saturating_sub(u32::try_from(used).unwrap_or(u32::MAX)));
    if granted > 0 {
        let taken = tx
            .prepare_cached("UPDATE key_rates SET used = used + $3 WHERE hash = $1 AND second = $2")
            .await
            .map_err(db_error)?;
        tx.execute(&taken, &[&key, &second, &i32::try_from(granted).unwrap_or(i32::MAX)]).await.map_err(db_error)?;
    }
    tx.commit().await.map_err(db_error)?;
    Ok(granted)
}
