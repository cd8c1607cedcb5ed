//! The money rules as tables: each case an input and the outcome it must give, written as text and checked
//! by one `check` per rule (rust-analyzer's style), so a case is one line to read or add. Prices are the
//! spec's (placeholder) figures for the models named: `alpha2.6-t2v_t2v` bills 110,000 a second at 720P and
//! 170,000 at 1080P, `alpha2.6-i2v-flash_i2v` 80,000 a silent second at 720P, `beta-image-2.0-pro_t2i`
//! 40,000 an image. What the upstream reports is written `seconds=3 resolution=720P`, as its adapter would
//! measure it (`images=bad` for a count that makes no sense).
#![allow(clippy::unwrap_used)]

use super::books::{Funds, Pot, Shortfall, plan_hold};
use super::pricing::{actual, quote};
use super::{Ending, MAX_MICROS, TaskBilling, checked_sum, settle};
use crate::domain::catalog::ModelSpec;
use crate::domain::usage::{Measured, Reading};
use serde_json::{Map, Value};

fn model(id: &str) -> &'static ModelSpec {
    ModelSpec::find(id).unwrap()
}

fn body(text: &str) -> Map<String, Value> {
    serde_json::from_str(text).unwrap()
}

fn split(split: &[(Pot, i64)]) -> String {
    split.iter().map(|(pot, amount)| format!("{pot:?} {amount}")).collect::<Vec<_>>().join(", ")
}

/// What an upstream's report says was delivered, written `name=value` (`bad` for no count).
fn measured(text: &str) -> Measured {
    let mut measured = Measured::default();
    for pair in text.split_whitespace() {
        let (name, value) = pair.split_once('=').unwrap();
        let seconds = || value.parse().map_or(Reading::Unusable, Reading::Count);
        let whole = || value.parse().map_or(Reading::Unusable, Reading::Count);
        match name {
            "seconds" => measured.seconds = seconds(),
            "input_seconds" => measured.input_video_seconds = seconds(),
            "images" => measured.images = whole(),
            "resolution" => measured.resolution = Some(value.into()),
            "audio" => measured.audio = Some(value == "true"),
            other => panic!("no reading `{other}`"),
        }
    }
    measured
}

/// Funding order: the free trial first, then the plan, then the balance; a trial-only model only from the
/// trial; never more than the pots hold, and nothing taken from a pot below zero.
#[test]
fn funding_order() {
    #[track_caller]
    fn check(free_trial: i64, plan: i64, balance: i64, amount: i64, trial_only: bool, expect: &str) {
        let funds = Funds { free_trial, plan, balance };
        let got = match plan_hold(&funds, amount, trial_only) {
            Ok(taken) => split(&taken),
            Err(Shortfall::Insufficient { needed, available }) => format!("insufficient {needed} of {available}"),
            Err(Shortfall::TrialExhausted { needed, available }) => format!("trial exhausted {needed} of {available}"),
        };
        assert_eq!(got, expect, "funds {free_trial}/{plan}/{balance}, {amount}, trial only {trial_only}");
    }
    check(100, 50, 1000, 120, false, "FreeTrial 100, Plan 20");
    check(100, 50, 1000, 400, false, "FreeTrial 100, Plan 50, Balance 250");
    check(0, 0, 1000, 1000, false, "Balance 1000");
    check(0, 0, 999, 1000, false, "insufficient 1000 of 999");
    check(-50, 0, 100, 100, false, "Balance 100");
    check(100, 50, 1000, 100, true, "FreeTrial 100");
    check(100, 50, 1000, 101, true, "trial exhausted 101 of 100");
    check(0, 0, 0, 0, false, "");
}

/// Quotes: seconds times the tier's price (the size's tier, audio or silent), images times `n`; the
/// model's defaults where the request says nothing.
#[test]
fn quotes() {
    #[track_caller]
    fn check(id: &str, request: &str, expect: &str) {
        let (amount, units) = quote(model(id), &body(request));
        assert_eq!(format!("{amount} {}", serde_json::to_string(&units).unwrap()), expect, "{id} {request}");
    }
    check(
        "alpha2.6-t2v_t2v",
        r#"{"duration": 5, "size": "1280*720"}"#,
        r#"550000 {"seconds":5.0,"resolution":"720P","audio":true}"#,
    );
    check("alpha2.6-t2v_t2v", r#"{"duration": 3}"#, r#"510000 {"seconds":3.0,"resolution":"1080P","audio":true}"#);
    check(
        "alpha2.6-i2v-flash_i2v",
        r#"{"duration": 4, "resolution": "720p", "audio": false}"#,
        r#"320000 {"seconds":4.0,"resolution":"720P","audio":false}"#,
    );
    check("beta-image-2.0-pro_t2i", r#"{"n": 3}"#, r#"120000 {"images":3}"#);
    check("beta-image-2.0-pro_t2i", r#"{}"#, r#"40000 {"images":1}"#);
}

/// What a task is priced at when it ends: what the upstream says was delivered, or the quote when it says
/// nothing, or something that makes no sense.
#[test]
fn delivered_prices() {
    #[track_caller]
    fn check(id: &str, request: &str, report: &str, expect: &str) {
        let model = model(id);
        let (quoted, units) = quote(model, &body(request));
        let delivered = actual(model, quoted, &units, &measured(report));
        let unusable = if delivered.usage_unusable { " (usage unusable: as quoted)" } else { "" };
        assert_eq!(format!("{}{unusable}", delivered.amount), expect, "{id} {request} {report}");
    }
    let t2v = r#"{"duration": 5, "size": "1280*720"}"#;
    check("alpha2.6-t2v_t2v", t2v, "seconds=5 resolution=720P", "550000");
    check("alpha2.6-t2v_t2v", t2v, "seconds=3 resolution=720P", "330000");
    check("alpha2.6-t2v_t2v", t2v, "seconds=2", "220000");
    check("alpha2.6-t2v_t2v", t2v, "seconds=5 resolution=1080P", "850000");
    check("alpha2.6-t2v_t2v", t2v, "", "550000");
    check("alpha2.6-t2v_t2v", t2v, "seconds=9", "550000 (usage unusable: as quoted)");
    check("alpha2.6-t2v_t2v", t2v, "seconds=7 input_seconds=2", "770000");
    check("alpha2.6-t2v_t2v", t2v, "seconds=bad", "550000 (usage unusable: as quoted)");
    check("alpha2.6-i2v-flash_i2v", r#"{"duration": 4, "resolution": "720p"}"#, "seconds=4 audio=false", "320000");
    let images = r#"{"n": 3}"#;
    check("beta-image-2.0-pro_t2i", images, "images=2", "80000");
    check("beta-image-2.0-pro_t2i", images, "images=4", "120000 (usage unusable: as quoted)");
    check("beta-image-2.0-pro_t2i", images, "images=bad", "120000 (usage unusable: as quoted)");
    check("beta-image-2.0-pro_t2i", images, "", "120000");
}

/// Settlement: a held task posts what was delivered and gives the rest back, pot by pot in funding order;
/// one that did not deliver voids its hold; an earmarked task is charged what it used and has nothing to
/// give back; never more than the hold; and a task settles once.
#[test]
fn settlements() {
    #[track_caller]
    fn check(hold: &[(Pot, i64)], earmarked: bool, report: Option<&str>, expect: &str) {
        let model = model("alpha2.6-t2v_t2v");
        let (quoted, units) = quote(model, &body(r#"{"duration": 5, "size": "1280*720"}"#));
        let mut billing = TaskBilling { quoted, units, hold: hold.to_vec(), earmarked, ..TaskBilling::default() };
        let report = report.map(measured);
        let ending = Ending {
            task_id: "task-1",
            account: "acme",
            model: model.id,
            state: if report.is_some() { "success" } else { "failed" },
            delivered: report.as_ref(),
        };
        let settled = settle(&mut billing, &ending).unwrap();
        let settlement = billing.settlement.as_ref().unwrap();
        let entries: Vec<String> =
            settled.postings.iter().map(|p| format!("{:?} {:?} {}", p.kind, p.pot, p.delta)).collect();
        let got = format!(
            "{} charged {} from [{}]; entries [{}]",
            settlement.outcome,
            settlement.charged,
            split(&settlement.by_pot),
            entries.join(", ")
        );
        assert_eq!(got, expect, "{hold:?} earmarked {earmarked}");
        assert!(settle(&mut billing, &ending).is_none(), "settled twice");
    }
    let held = [(Pot::FreeTrial, 100_000), (Pot::Plan, 200_000), (Pot::Balance, 250_000)];
    check(
        &held,
        false,
        Some("seconds=3 resolution=720P"),
        "posted charged 330000 from [FreeTrial 100000, Plan 200000, Balance 30000]; \
         entries [Post FreeTrial 0, Post Plan 0, Post Balance 220000]",
    );
    check(
        &held,
        false,
        None,
        "voided charged 0 from []; entries [Void FreeTrial 100000, Void Plan 200000, Void Balance 250000]",
    );
    check(
        &[(Pot::Balance, 550_000)],
        true,
        Some("seconds=2 resolution=720P"),
        "posted charged 220000 from [Balance 220000]; entries [Charge Balance -220000]",
    );
    check(&[(Pot::Balance, 550_000)], true, None, "voided charged 0 from []; entries []");
    // Delivered at 1080P, dearer than the 720P hold: charged the hold, never more.
    check(
        &[(Pot::Balance, 550_000)],
        false,
        Some("seconds=5 resolution=1080P"),
        "posted charged 550000 from [Balance 550000]; entries [Post Balance 0]",
    );
}

/// Sums of money stay within ±`MAX_MICROS`; one past it is refused, not wrapped.
#[test]
fn sums_of_money() {
    #[track_caller]
    fn check(a: i64, b: i64, expect: Option<i64>) {
        assert_eq!(checked_sum(a, b), expect, "{a} + {b}");
    }
    check(1, 2, Some(3));
    check(MAX_MICROS, 0, Some(MAX_MICROS));
    check(MAX_MICROS, 1, None);
    check(-MAX_MICROS, -1, None);
    check(i64::MAX, 1, None);
    check(MAX_MICROS, -MAX_MICROS, Some(0));
}
