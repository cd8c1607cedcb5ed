//! `mediagate demo`: the gateway and the upstream simulator in one process, on one port, over an embedded
//! store under one data dir. Started again on the same dir it resumes: same key, same tasks, and the
//! simulator's own tasks (persisted beside the gateway's) carry on.

use crate::config::Config;
use crate::server;
use crate::simulator::{Simulator, SimulatorConfig};
use crate::upstream::{RegionUpstream, Upstreams};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

pub struct DemoOptions {
    /// Settings other than address, data dir and upstreams (which the demo decides).
    pub config: Config,
    pub listen: SocketAddr,
    pub data_dir: PathBuf,
    pub api_key: Option<String>,
    pub time_scale: f64,
}

/// The account the demo's key belongs to.
pub const DEMO_ACCOUNT: &str = "demo";
/// The simulator is mounted under this path of the gateway's own port.
pub const UPSTREAM_PREFIX: &str = "/upstream";

pub fn run(options: DemoOptions) -> Result<(), String> {
    let listener = std::net::TcpListener::bind(options.listen).map_err(|e| format!("bind {}: {e}", options.listen))?;
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let mut config = Config { listen: addr, data_dir: options.data_dir.join("gateway"), ..options.config.clone() };
    // The simulated jobs take seconds, not minutes: poll on the simulator's clock.
    config.poller.min_interval_ms = ((250.0 * options.time_scale) as u64).max(10);
    config.poller.max_interval_ms = ((2000.0 * options.time_scale) as u64).max(50);

    let regions = crate::catalog::REGIONS;
    let upstream_key = |region: &str| format!("demo-upstream-{region}");
    let simulator = Arc::new(
        Simulator::open(SimulatorConfig {
            time_scale: options.time_scale,
            keys: regions.iter().map(|r| (r.to_string(), vec![upstream_key(r)])).collect(),
            data_dir: Some(options.data_dir.join("simulator")),
            public_base: format!("http://{addr}{UPSTREAM_PREFIX}"),
            query_qps: Some(f64::from(config.poller.queries_per_second)),
        })
        .map_err(|e| format!("simulator: {e}"))?,
    );
    let mut upstreams = Upstreams::default();
    for region in regions {
        let base = simulator.region_base_url(region);
        upstreams.insert(region, RegionUpstream::new(&base, &[upstream_key(region)], Duration::from_secs(30))?);
    }
    let state = server::build_state(config, upstreams).map_err(|e| e.to_string())?;
    let key = demo_key(&state.store, &options)?;
    fund_demo_account(&state.store)?;
    print_banner(addr, &key);
    let mount = move |cfg: &mut actix_web::web::ServiceConfig| {
        let simulator = simulator.clone();
        cfg.service(actix_web::web::scope(UPSTREAM_PREFIX).configure(move |c| simulator.configure(c)));
    };
    actix_web::rt::System::new().block_on(server::run(state, listener, mount)).map_err(|e| e.to_string())
}

/// The key asked for, else the one made on an earlier start, else a new one (kept in the data dir).
fn demo_key(store: &crate::store::Store, options: &DemoOptions) -> Result<String, String> {
    let remembered = options.data_dir.join("demo-api-key");
    let key = match &options.api_key {
        Some(key) => key.clone(),
        None => match std::fs::read_to_string(&remembered) {
            Ok(key) if !key.trim().is_empty() => key.trim().to_string(),
            _ => store.create_key(DEMO_ACCOUNT).map_err(|e| e.to_string())?,
        },
    };
    store.insert_key(DEMO_ACCOUNT, &key).map_err(|e| e.to_string())?;
    std::fs::write(&remembered, &key).map_err(|e| format!("{}: {e}", remembered.display()))?;
    Ok(key)
}

/// Money the demo account starts with, once: a balance and a free trial (micro-units).
pub const DEMO_BALANCE: i64 = 1_000_000_000;
pub const DEMO_FREE_TRIAL: i64 = 100_000_000;

fn fund_demo_account(store: &crate::store::Store) -> Result<(), String> {
    use crate::store::ledger::{EntryKind, Posting, Pot};
    if store.has_entries(DEMO_ACCOUNT).map_err(|e| e.to_string())? {
        return Ok(());
    }
    let posting = |kind, pot, delta| Posting {
        account: DEMO_ACCOUNT.into(),
        kind,
        pot,
        delta,
        task_id: None,
        note: "demo start".into(),
    };
    store
        .post(&[
            posting(EntryKind::TopUp, Pot::Balance, DEMO_BALANCE),
            posting(EntryKind::Grant, Pot::FreeTrial, DEMO_FREE_TRIAL),
        ])
        .map_err(|e| e.to_string())
}

fn print_banner(addr: SocketAddr, key: &str) {
    println!(
        r#"mediagate demo: gateway and simulated upstream on http://{addr}
API key (account "{DEMO_ACCOUNT}"): {key}

Submit a text-to-video job:
  curl -s http://{addr}/v1/videos/generations -H "Authorization: Bearer {key}" \
    -H "Content-Type: application/json" \
    -d '{{"model":"alpha2.6-t2v_t2v","prompt":"a red fox running through snow at dawn","duration":5}}'

Poll it (use the task_id from the answer):
  curl -s http://{addr}/v1/tasks/TASK_ID -H "Authorization: Bearer {key}"

List models:  curl -s http://{addr}/v1/models -H "Authorization: Bearer {key}"
"#
    );
}
