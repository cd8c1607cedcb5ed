//! What one upstream account may run at once (docs/upstream-protocol.md section 7.1): a cap on its tasks
//! pending or running per model, and a create rate. Each key is one account here. A create over either
//! answers 429 `Throttling.RateQuota`; the counters show a test how close a client came.

use serde::Serialize;
use std::collections::{BTreeMap, HashMap};
use std::sync::Mutex;

/// Running tasks per account and model, by the simulator's own figures: 2 for the VACE models, 5 for the
/// rest (an account tier's figures; `--concurrency` sets one cap for every model).
pub fn default_cap(model_code: &str) -> u32 {
    if model_code.contains("vace") { 2 } else { 5 }
}

/// One key's figures for one model.
#[derive(Debug, Clone, Copy, Default, Serialize)]
pub struct ModelStats {
    pub running: u32,
    pub max_running: u32,
    pub accepted: u64,
    pub refused_for_capacity: u64,
}

#[derive(Default)]
struct Account {
    /// model code -> the end times (epoch ms) of its tasks that may still be running, by task id.
    live: HashMap<String, HashMap<String, i64>>,
    stats: BTreeMap<String, ModelStats>,
    /// The wall-clock second of the last create and the creates in it.
    second: i64,
    creates_in_second: u32,
}

/// Why a create was refused.
pub enum Refused {
    Running,
    Rate,
}

pub struct Capacity {
    /// Every model's cap, when `--concurrency` set one.
    cap: Option<u32>,
    create_qps: Option<u32>,
    /// (region, key index) -> the account's tasks and counters.
    accounts: Mutex<BTreeMap<(String, usize), Account>>,
}

impl Capacity {
    pub fn new(cap: Option<u32>, create_qps: Option<u32>) -> Capacity {
        Capacity { cap, create_qps, accounts: Mutex::default() }
    }

    /// Takes a running slot of `model` for a task ending at `end_ms` (`i64::MAX`: never) created by key `key`,
    /// or says why not.
    pub fn admit(
        &self,
        region: &str,
        key: usize,
        model: &str,
        task_id: &str,
        now: i64,
        end_ms: i64,
    ) -> Result<(), Refused> {
        let cap = self.cap.unwrap_or_else(|| default_cap(model));
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        let account = accounts.entry((region.to_string(), key)).or_default();
        let second = now.div_euclid(1000);
        if account.second != second {
            (account.second, account.creates_in_second) = (second, 0);
        }
        let live = account.live.entry(model.to_string()).or_default();
        live.retain(|_, end| *end > now);
        let stats = account.stats.entry(model.to_string()).or_default();
        if live.len() as u32 >= cap {
            stats.refused_for_capacity += 1;
            return Err(Refused::Running);
        }
        if self.create_qps.is_some_and(|qps| account.creates_in_second >= qps) {
            return Err(Refused::Rate);
        }
        account.creates_in_second += 1;
        live.insert(task_id.to_string(), end_ms);
        stats.accepted += 1;
        stats.max_running = stats.max_running.max(live.len() as u32);
        Ok(())
    }

    /// A task that ended early (cancelled) frees its slot.
    pub fn ended(&self, region: &str, model: &str, task_id: &str) {
        let mut accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        for (_, account) in accounts.iter_mut().filter(|((r, _), _)| r == region) {
            if let Some(live) = account.live.get_mut(model) {
                live.remove(task_id);
            }
        }
    }

    /// Per region and key index: per model, running now and the counters.
    pub fn stats(&self, now: i64) -> Vec<serde_json::Value> {
        let accounts = self.accounts.lock().unwrap_or_else(|e| e.into_inner());
        accounts
            .iter()
            .map(|((region, key), account)| {
                let models: BTreeMap<&String, ModelStats> = account
                    .stats
                    .iter()
                    .map(|(model, stats)| {
                        let running = account.live.get(model).map_or(0, |l| l.values().filter(|e| **e > now).count());
                        (model, ModelStats { running: running as u32, ..*stats })
                    })
                    .collect();
                serde_json::json!({"region": region, "key": key, "models": models})
            })
            .collect()
    }
}
