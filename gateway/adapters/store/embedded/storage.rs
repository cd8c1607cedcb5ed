//! The embedded store as the gateway's [`Storage`]. Reads run on the calling thread (a view never waits for
//! the writer); writes are queued to the group-commit writer, and the admin's writes, which block until
//! durable, run on the blocking pool.

use super::{
    Account, Commit, Earmark, Hold, IdempotencyClaim, IdempotencyRecord, Inserted, KeyRecord, Store, StoreError,
    TaskRecord, TaskRef, TaskStatus,
};
use crate::domain::billing::audit::LedgerReport;
use crate::domain::billing::books::{Entry, Funds, Posting, Shortfall};
use crate::domain::deliveries::{Delivery, DeliveryFilter, WebhookSettings};
use crate::domain::listing::TaskQuery;
use crate::domain::results::Mirror;
use crate::domain::results::TaskResult;
use crate::domain::usage_log::UsageFilter;
use crate::ports::storage::{Forwarded, SettingsChange, Storage, TaskChange};
use std::sync::Arc;

/// Runs one of the store's blocking calls off the async worker.
async fn blocking<T: Send + 'static>(
    store: &Store,
    call: impl FnOnce(&Store) -> Result<T, StoreError> + Send + 'static,
) -> Result<T, StoreError> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || call(&store))
        .await
        .map_err(|e| StoreError::new(format!("a store call stopped: {e}")))?
}

#[async_trait::async_trait]
impl Storage for Store {
    async fn ensure_account(&self, name: &str) -> Result<Account, StoreError> {
        let name = name.to_string();
        blocking(self, move |store| store.ensure_account(&name)).await
    }

    async fn account(&self, name: &str) -> Result<Option<Account>, StoreError> {
        Store::account(self, name)
    }

    async fn set_plan(&self, account: &str, plan: &str, allowance: i64) -> Result<Account, StoreError> {
        let (account, plan) = (account.to_string(), plan.to_string());
        blocking(self, move |store| store.set_plan(&account, &plan, allowance)).await
    }

    async fn insert_key(&self, account: &str, key: &str) -> Result<(), StoreError> {
        let (account, key) = (account.to_string(), key.to_string());
        blocking(self, move |store| store.insert_key(&account, &key)).await
    }

    async fn key(&self, hash: &[u8; 32]) -> Result<Option<Arc<KeyRecord>>, StoreError> {
        Store::key(self, hash)
    }

    fn keeps_limits(&self) -> bool {
        false
    }

    async fn admit_request(&self, _: &[u8; 32], _: u32) -> Result<bool, StoreError> {
        Ok(true)
    }

    fn cached_key(&self, hash: &[u8; 32]) -> Option<Arc<KeyRecord>> {
        self.key_cache.get(hash).1
    }

    async fn keys_of(&self, account: &str) -> Result<Vec<KeyRecord>, StoreError> {
        Store::keys_of(self, account)
    }

    async fn revoke_keys(&self, account: &str, prefix: &str) -> Result<usize, StoreError> {
        let (account, prefix) = (account.to_string(), prefix.to_string());
        blocking(self, move |store| store.revoke_keys(&account, &prefix)).await
    }

    async fn post(&self, postings: Vec<Posting>) -> Result<(), StoreError> {
        blocking(self, move |store| store.post(&postings)).await
    }

    async fn has_entries(&self, account: &str) -> Result<bool, StoreError> {
        Store::has_entries(self, account)
    }

    async fn funds(&self, account: &str) -> Result<Funds, StoreError> {
        Store::funds(self, account)
    }

    fn earmarked(&self, account: &str) -> Funds {
        Store::earmarked(self, account)
    }

    async fn entries(&self, account: Option<&str>) -> Result<Vec<Entry>, StoreError> {
        Store::entries(self, account)
    }

    async fn verify_ledger(&self) -> Result<LedgerReport, StoreError> {
        blocking(self, Store::verify_ledger).await
    }

    async fn usage(&self, filter: UsageFilter) -> Result<Vec<serde_json::Value>, StoreError> {
        Store::usage(self, &filter)
    }

    async fn add_task(
        &self,
        new: TaskRecord,
        idempotency: Option<IdempotencyClaim>,
        hold: Option<Hold>,
        commit: Commit,
    ) -> Result<Inserted, StoreError> {
        Store::add_task(self, new, idempotency, hold, commit).await
    }

    fn earmarks_in_memory(&self) -> bool {
        true
    }

    async fn earmark(&self, account: &str, hold: Hold) -> Result<Result<Earmark, Shortfall>, StoreError> {
        Store::earmark(self, account, hold).await
    }

    fn earmark_now(&self, account: &str, hold: Hold) -> Option<Result<Earmark, Shortfall>> {
        Store::earmark_now(self, account, hold)
    }

    async fn add_ended(&self, task: TaskRecord, earmark: Earmark) -> Result<TaskRecord, StoreError> {
        Store::add_ended(self, task, earmark).await
    }

    async fn task(&self, task_id: &str) -> Result<Option<TaskRecord>, StoreError> {
        Store::task(self, task_id)
    }

    async fn list_tasks(&self, query: TaskQuery) -> Result<Vec<TaskRecord>, StoreError> {
        Store::list_tasks(self, &query)
    }

    async fn change_task(
        &self,
        task: TaskRef,
        expected: &[TaskStatus],
        commit: Commit,
        change: TaskChange,
    ) -> Result<Option<TaskRecord>, StoreError> {
        Store::change_task(self, task, expected, commit, change).await
    }

    async fn forwarded(&self, task: TaskRef, change: TaskChange) -> Result<Option<Forwarded>, StoreError> {
        let written = Store::change_task(self, task, &[TaskStatus::Queued], Commit::Durable, change).await?;
        Ok(written.map(|task| Forwarded { task, polled_here: true }))
    }

    async fn claim(&self) -> Result<Vec<TaskRecord>, StoreError> {
        // This process polls every task of the store: all that are live when it first asks, and then
        // those it submits itself.
        if self.claimed.swap(true, std::sync::atomic::Ordering::AcqRel) {
            return Ok(Vec::new());
        }
        Store::in_flight(self)
    }

    async fn polls_here(&self, task_id: &str) -> Result<bool, StoreError> {
        Ok(Store::task(self, task_id)?.is_some_and(|task| !task.status.is_terminal()))
    }

    async fn leased(&self, _: Option<String>, _: usize) -> Result<Option<Vec<TaskRecord>>, StoreError> {
        Ok(None)
    }

    async fn abandoned(&self, task: &TaskRecord, started_ms: i64) -> Result<bool, StoreError> {
        Ok(task.created_ms < started_ms)
    }

    fn poll_share(&self) -> Option<u32> {
        Some(1)
    }

    async fn idempotency(&self, key: &str) -> Result<Option<IdempotencyRecord>, StoreError> {
        Store::idempotency(self, key)
    }

    async fn webhook_settings(&self, account: &str) -> Result<Option<WebhookSettings>, StoreError> {
        Store::webhook_settings(self, account)
    }

    async fn change_webhook_settings(
        &self,
        account: &str,
        change: SettingsChange,
    ) -> Result<WebhookSettings, StoreError> {
        Store::change_webhook_settings(self, account, change).await
    }

    async fn due_deliveries(&self, now_ms: i64, limit: usize) -> Result<Vec<Delivery>, StoreError> {
        Store::due_deliveries(self, now_ms, limit)
    }

    async fn save_delivery(&self, attempted: Delivery) -> Result<(), StoreError> {
        Store::save_delivery(self, attempted).await
    }

    async fn replay_delivery(&self, id: &str, now_ms: i64) -> Result<Option<Delivery>, StoreError> {
        Store::replay_delivery(self, id, now_ms).await
    }

    async fn due_mirrors(&self, now_ms: i64, lease_ms: i64, limit: usize) -> Result<Vec<TaskRecord>, StoreError> {
        Store::due_mirrors(self, now_ms, lease_ms, limit).await
    }

    async fn renew_mirrors(&self, task_ids: Vec<String>, until_ms: i64) -> Result<(), StoreError> {
        Store::renew_mirrors(self, task_ids, until_ms).await
    }

    async fn save_mirror(
        &self,
        task_id: &str,
        mirror: Mirror,
        results: Vec<TaskResult>,
        retry_ms: Option<i64>,
    ) -> Result<(), StoreError> {
        Store::save_mirror(self, task_id, mirror, results, retry_ms).await
    }

    async fn delivery(&self, id: &str) -> Result<Option<Delivery>, StoreError> {
        Store::delivery(self, id)
    }

    async fn deliveries(&self, filter: DeliveryFilter) -> Result<Vec<Delivery>, StoreError> {
        Store::deliveries(self, &filter)
    }

    async fn model_switches(&self) -> Result<Vec<(String, bool)>, StoreError> {
        Store::model_switches(self)
    }

    async fn set_model_switch(&self, model: &str, enabled: bool) -> Result<(), StoreError> {
        let model = model.to_string();
        blocking(self, move |store| store.set_model_switch(&model, enabled)).await
    }

    fn writable(&self) -> bool {
        Store::writable(self)
    }

    async fn broken(&self) {
        Store::broken(self).await
    }

    async fn caught_up(&self) -> Result<(), StoreError> {
        Store::caught_up(self).await
    }

    async fn changed(&self) {
        std::future::pending().await
    }

    async fn shared_secret(&self, _: &str, _: Vec<u8>) -> Result<Option<Vec<u8>>, StoreError> {
        Ok(None)
    }

    async fn close(&self) -> Result<(), StoreError> {
        blocking(self, Store::close).await
    }
}
