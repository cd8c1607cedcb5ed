//! Property tests: random sequences of top-ups, plan changes, submissions (held, and earmarked ones written
//! once when they end), settlements with sensible and senseless usage, failures and crashes, against a
//! simple model of what was acknowledged. After each crash the store is recovered from the files a killed
//! process leaves, and checked: every acknowledged task is there as acknowledged, and ends at most once;
//! every pot equals its entries and is never negative; every settlement lies within `[0, hold]`; and no
//! money was made: the pots, what live tasks hold and what settled tasks charged add up to what was paid in.

use super::Hold;
use super::{Commit, Inserted, Store, TaskRecord, TaskStatus, wal};
use crate::domain::billing::books::{EntryKind, Posting, Pot};
use crate::domain::usage::{Measured, Reading};
use crate::ports::storage::{Accounts, Ledger, Tasks};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::path::Path;

/// The model priced per image; its quote is `PRICE * n`.
const MODEL: &str = "beta-image-2.0-pro_t2i";

#[derive(Debug, Clone)]
enum Op {
    TopUp(i64),
    Plan(i64),
    /// A task whose hold is ledger entries, for `n` images.
    Held(u64),
    /// A task whose money is earmarked and that is written once, ending with `delivered` images.
    Earmarked {
        n: u64,
        delivered: i64,
    },
    /// The `index`th held task (of those submitted) succeeds with `delivered` images, or fails.
    End {
        index: usize,
        delivered: Option<i64>,
    },
    Crash,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        2 => (1..5_000_000i64).prop_map(Op::TopUp),
        1 => (0..5_000_000i64).prop_map(Op::Plan),
        4 => (1..4u64).prop_map(Op::Held),
        2 => ((1..4u64), (-2..6i64)).prop_map(|(n, delivered)| Op::Earmarked { n, delivered }),
        4 => (any::<usize>(), proptest::option::of(-2..6i64)).prop_map(|(index, delivered)| Op::End { index, delivered }),
        1 => Just(Op::Crash),
    ]
}

/// What the clients were told.
#[derive(Default)]
struct Acknowledged {
    /// Task id -> its status as last acknowledged.
    tasks: BTreeMap<String, TaskStatus>,
    held: Vec<String>,
}

fn task(id: &str, n: u64, quoted: i64) -> TaskRecord {
    let mut task: TaskRecord = serde_json::from_value(serde_json::json!({
        "task_id": id, "request_id": "img-1", "account": "acme", "key_prefix": "mg-1",
        "model": MODEL, "operation": "t2i", "media": "image", "status": "queued",
        "created_at": "2026-11-25 10:00:00", "created_ms": 1, "updated_ms": 1, "deadline_ms": i64::MAX,
        "billing": {"quoted": quoted, "units": {"images": n}, "hold": [], "baseline": 10_000_000},
    }))
    .unwrap_or_else(|e| panic!("{e}"));
    task.next_poll_ms = 0;
    task
}

/// `status`, with the usage of `delivered` images when it is a success (a negative count is senseless).
fn ended(status_of: Option<i64>) -> impl FnOnce(&mut TaskRecord) + Send + 'static {
    move |t| match status_of {
        Some(delivered) => {
            t.status = TaskStatus::Success;
            t.usage = Some(serde_json::json!({"image_count": delivered}).into());
            // As the upstream's adapter measures it: a negative count is none.
            let images = u64::try_from(delivered).map_or(Reading::Unusable, Reading::Count);
            t.measured = Some(Measured { images, ..Measured::default() });
        }
        None => t.status = TaskStatus::Failed,
    }
}

fn quote(n: u64) -> i64 {
    let model = crate::domain::catalog::ModelSpec::find(MODEL).unwrap_or_else(|| panic!("{MODEL} is in the spec"));
    let body = serde_json::json!({"n": n});
    crate::domain::billing::pricing::quote(model, body.as_object().unwrap_or_else(|| panic!("an object"))).0
}

fn run(ops: Vec<Op>) {
    let live = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    let store = Store::open(live.path()).unwrap_or_else(|e| panic!("{e}"));
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap_or_else(|e| panic!("{e}"));
    let mut seen = Acknowledged::default();
    runtime
        .block_on(store.ensure_account("acme", &crate::domain::audit::Actor::local()))
        .unwrap_or_else(|e| panic!("{e}"));
    for (step, op) in ops.into_iter().chain([Op::Crash]).enumerate() {
        let id = format!("task-{step}");
        match op {
            Op::TopUp(amount) => {
                let posting = Posting {
                    account: "acme".into(),
                    kind: EntryKind::TopUp,
                    pot: Pot::Balance,
                    delta: amount,
                    task_id: None,
                    note: String::new(),
                };
                runtime
                    .block_on(store.post(vec![posting], &crate::domain::audit::Actor::local()))
                    .unwrap_or_else(|e| panic!("{e}"));
            }
            // Lowering a plan below what is held or earmarked may be refused; nothing is written then.
            Op::Plan(allowance) => {
                drop(runtime.block_on(store.set_plan("acme", "p", allowance, &crate::domain::audit::Actor::local())))
            }
            Op::Held(n) => {
                let hold = Hold { amount: quote(n), trial_only: false };
                let added = store.add_task(task(&id, n, quote(n)), None, Some(hold), Commit::Durable);
                if let Ok(Inserted::Stored(_)) = runtime.block_on(added) {
                    seen.tasks.insert(id.clone(), TaskStatus::Queued);
                    seen.held.push(id);
                }
            }
            Op::Earmarked { n, delivered } => {
                let hold = Hold { amount: quote(n), trial_only: false };
                let Ok(Ok(earmark)) = runtime.block_on(store.earmark("acme", hold)) else { continue };
                let mut record = task(&id, n, quote(n));
                if let Some(billing) = record.billing.as_mut() {
                    (billing.hold, billing.earmarked) = (earmark.split().to_vec(), true);
                }
                ended(Some(delivered))(&mut record);
                if runtime.block_on(store.add_ended(record, earmark)).is_ok() {
                    seen.tasks.insert(id, TaskStatus::Success);
                }
            }
            Op::End { index, delivered } => {
                let Some(id) = seen.held.get(index % seen.held.len().max(1)).cloned() else { continue };
                let live = [TaskStatus::Queued, TaskStatus::Running];
                let changed = store.change_task(id.as_str().into(), &live, Commit::Durable, Box::new(ended(delivered)));
                if let Ok(Some(task)) = runtime.block_on(changed) {
                    let before = seen.tasks.insert(id.clone(), task.status);
                    assert_eq!(before, Some(TaskStatus::Queued), "{id} ended twice");
                }
            }
            Op::Crash => check_recovered(&runtime, live.path(), &seen),
        }
    }
}

/// Recovers the store from the files a process killed now would leave, and checks it.
fn check_recovered(runtime: &tokio::runtime::Runtime, live: &Path, seen: &Acknowledged) {
    let image = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
    for file in ["mediagate.redb", wal::FILES[0], wal::FILES[1]] {
        std::fs::copy(live.join(file), image.path().join(file)).unwrap_or_else(|e| panic!("{e}"));
    }
    let store = Store::open(image.path()).unwrap_or_else(|e| panic!("{e}"));
    let report = runtime.block_on(store.verify_ledger()).unwrap_or_else(|e| panic!("{e}"));
    assert_eq!(report.problems, Vec::<String>::new());
    let mut held = 0;
    let mut charged = 0;
    for (id, status) in &seen.tasks {
        let task =
            runtime.block_on(store.task(id)).unwrap_or_else(|e| panic!("{e}")).unwrap_or_else(|| panic!("{id} lost"));
        assert_eq!(task.status, *status, "{id}");
        let billing = task.billing.as_ref().unwrap_or_else(|| panic!("{id} has no billing"));
        let hold: i64 = billing.hold.iter().map(|(_, a)| a).sum();
        match &billing.settlement {
            Some(settlement) => {
                assert!(status.is_terminal(), "{id} settled while live");
                assert!((0..=hold).contains(&settlement.charged), "{id}: {} of {hold}", settlement.charged);
                charged += settlement.charged;
            }
            None => {
                assert!(!status.is_terminal(), "{id} ended unsettled");
                held += hold;
            }
        }
    }
    // No money made: the pots, what is held and what was charged are what was paid in.
    let funds = runtime.block_on(store.funds("acme")).unwrap_or_else(|e| panic!("{e}"));
    let paid_in: i64 = runtime
        .block_on(store.entries(Some("acme")))
        .unwrap_or_else(|e| panic!("{e}"))
        .iter()
        .filter(|e| matches!(e.kind, EntryKind::TopUp | EntryKind::Plan | EntryKind::Grant))
        .map(|e| e.delta)
        .sum();
    assert_eq!(funds.free_trial + funds.plan + funds.balance + held + charged, paid_in);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 16, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn random_histories_with_crashes_keep_every_task_and_every_cent(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}
