//! `mediagate demo`: the gateway and the upstream simulator in one process, over an embedded store under
//! one data dir. The simulator shares the gateway's port (under `/upstream`), or with `--upstream-tls` has
//! an HTTPS port of its own that the gateway reaches as it would a real upstream. Started again on the
//! same dir it resumes: same key, same tasks, and the simulator's own tasks (persisted beside the
//! gateway's) carry on.

use crate::adapters::upstream::{ProxyChoice, Reach, RegionUpstream, Upstreams};
use crate::app::config::Config;
use crate::app::server;
use crate::app::simulator::{Simulator, SimulatorConfig};
use crate::domain::audit::Actor;
use crate::ports::storage::Storage;
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
    /// Reach the simulator over HTTPS, on a port of its own, verified against a CA made at start.
    pub upstream_tls: bool,
}

/// The account the demo's key belongs to.
pub const DEMO_ACCOUNT: &str = "demo";
/// The simulator is mounted under this path of the gateway's own port.
pub const UPSTREAM_PREFIX: &str = "/upstream";

pub fn run(options: DemoOptions) -> Result<(), String> {
    let listener_of_gateway =
        std::net::TcpListener::bind(options.listen).map_err(|e| format!("bind {}: {e}", options.listen))?;
    listener_of_gateway.set_nonblocking(true).map_err(|e| e.to_string())?;
    let addr = listener_of_gateway.local_addr().map_err(|e| e.to_string())?;
    let mut config = Config { listen: addr, data_dir: options.data_dir.join("gateway"), ..options.config.clone() };
    // The console's operator side needs the admin token: one is made (and kept) unless the environment has it.
    let admin_token = match std::env::var(&config.admin_token_env).ok().filter(|t| !t.is_empty()) {
        Some(_) => format!("the one in {}", config.admin_token_env),
        None => {
            let made = remembered_secret(&options.data_dir.join("demo-admin-token"), None)?;
            config.admin_token = Some(made.clone());
            made
        }
    };
    // The demo runs on the operator's own machine: a webhook receiver there is at a loopback address.
    config.webhooks.allow_private_callbacks = true;
    // The simulated jobs take seconds, not minutes: poll on the simulator's clock.
    config.poller.min_interval_ms = ((250.0 * options.time_scale) as u64).max(10);
    config.poller.max_interval_ms = ((2000.0 * options.time_scale) as u64).max(50);

    let regions = crate::domain::catalog::REGIONS;
    let upstream_key = |region: &str| format!("demo-upstream-{region}");
    // With TLS the simulator listens on a loopback port of its own; its CA is written beside its tasks.
    let tls_listener = if options.upstream_tls {
        Some(std::net::TcpListener::bind("127.0.0.1:0").map_err(|e| format!("bind the simulator: {e}"))?)
    } else {
        None
    };
    let public_base = match &tls_listener {
        Some(listener) => format!("https://{}", listener.local_addr().map_err(|e| e.to_string())?),
        None => format!("http://{addr}{UPSTREAM_PREFIX}"),
    };
    let simulator = Arc::new(
        Simulator::open(SimulatorConfig {
            time_scale: options.time_scale,
            keys: regions.iter().map(|r| (r.to_string(), vec![upstream_key(r)])).collect(),
            data_dir: Some(options.data_dir.join("simulator")),
            public_base,
            query_qps: Some(f64::from(config.poller.queries_per_second)),
            concurrency: None,
            create_qps: None,
        })
        .map_err(|e| format!("simulator: {e}"))?,
    );
    let ca_file = options.data_dir.join("simulator").join("ca.pem");
    let simulator_tls = match tls_listener {
        Some(listener) => Some((listener, crate::app::simulator::tls::generate(&ca_file)?)),
        None => None,
    };
    let reach = Reach { ca_file: simulator_tls.as_ref().map(|_| ca_file.as_path()), proxy: ProxyChoice::Direct };
    let mut upstreams = Upstreams::default();
    for region in regions {
        let base = simulator.region_base_url(region);
        let upstream = RegionUpstream::new(region, &base, &[upstream_key(region)], Duration::from_secs(30), reach)?;
        upstreams.insert(region, upstream);
    }
    server::system()
        .block_on(async move {
            let wired = server::wire(config, upstreams).await?;
            let state = wired.gateway.clone();
            let key = demo_key(&*state.store, &options).await.map_err(std::io::Error::other)?;
            fund_demo_account(&*state.store).await.map_err(std::io::Error::other)?;
            let webhook_secret = demo_webhook_secret(&state, &options).await.map_err(std::io::Error::other)?;
            let url = server::public_url(&wired.config, addr);
            let simulator_ca = simulator_tls.as_ref().map(|_| (simulator.public_base(), ca_file.as_path()));
            print_banner(&url, &Secrets { key, admin_token, webhook_secret }, simulator_ca);
            match simulator_tls {
                Some((listener, tls)) => {
                    actix_web::rt::spawn(crate::app::simulator::server(simulator, listener, Some(tls))?);
                    server::run(wired, listener_of_gateway, |_: &mut actix_web::web::ServiceConfig| {}).await
                }
                None => {
                    let mount = move |cfg: &mut actix_web::web::ServiceConfig| {
                        let simulator = simulator.clone();
                        cfg.service(actix_web::web::scope(UPSTREAM_PREFIX).configure(move |c| simulator.configure(c)));
                    };
                    server::run(wired, listener_of_gateway, mount).await
                }
            }
        })
        .map_err(|e| e.to_string())
}

/// The key asked for, else the one made on an earlier start, else a new one (kept in the data dir).
async fn demo_key(store: &dyn Storage, options: &DemoOptions) -> Result<String, String> {
    let key = remembered_secret(&options.data_dir.join("demo-api-key"), options.api_key.as_deref())?;
    store.insert_key(DEMO_ACCOUNT, &key, &Actor::local()).await.map_err(|e| e.to_string())?;
    Ok(key)
}

/// The demo account's newest webhook secret (made on its first start), kept in the data dir for a receiver
/// to verify deliveries with.
async fn demo_webhook_secret(
    state: &crate::services::runtime::Gateway,
    options: &DemoOptions,
) -> Result<String, String> {
    let (secret, _) = crate::services::accounts::first_secret(state, DEMO_ACCOUNT).await.map_err(|e| e.to_string())?;
    let path = options.data_dir.join("demo-webhook-secret");
    std::fs::write(&path, &secret).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(secret)
}

/// `asked`, else the one kept at `path` by an earlier start, else a new one; kept at `path`.
fn remembered_secret(path: &std::path::Path, asked: Option<&str>) -> Result<String, String> {
    let secret = match asked {
        Some(secret) => secret.to_string(),
        None => match std::fs::read_to_string(path) {
            Ok(secret) if !secret.trim().is_empty() => secret.trim().to_string(),
            _ => crate::domain::tasks::new_key(),
        },
    };
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    }
    std::fs::write(path, &secret).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok(secret)
}

/// Money the demo account starts with, once: a balance and a free trial (micro-units).
pub const DEMO_BALANCE: i64 = 1_000_000_000;
pub const DEMO_FREE_TRIAL: i64 = 100_000_000;

async fn fund_demo_account(store: &dyn Storage) -> Result<(), String> {
    use crate::domain::billing::books::{EntryKind, Posting, Pot};
    if store.has_entries(DEMO_ACCOUNT).await.map_err(|e| e.to_string())? {
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
        .post(
            vec![
                posting(EntryKind::TopUp, Pot::Balance, DEMO_BALANCE),
                posting(EntryKind::Grant, Pot::FreeTrial, DEMO_FREE_TRIAL),
            ],
            &Actor::local(),
        )
        .await
        .map_err(|e| e.to_string())
}

/// What the demo prints that a user copies.
struct Secrets {
    key: String,
    admin_token: String,
    webhook_secret: String,
}

/// What the demo prints once it is ready: its address, its key and commands to copy, how to receive webhooks
/// and sign in to the console. `upstream_tls` is the simulator's HTTPS address and the CA that signed it,
/// when it has one.
fn print_banner(url: &str, secrets: &Secrets, upstream_tls: Option<(&str, &std::path::Path)>) {
    let upstream = match upstream_tls {
        Some((simulator, ca)) => {
            format!("Simulated upstream over HTTPS on {simulator}, signed by the CA in {}\n", ca.display())
        }
        None => format!("Simulated upstream on {url}{UPSTREAM_PREFIX}\n"),
    };
    let Secrets { key, admin_token, webhook_secret } = secrets;
    println!(
        r#"mediagate demo: gateway on {url}
{upstream}API key (account "{DEMO_ACCOUNT}"): {key}

Submit a text-to-video job:
  curl -s {url}/v1/videos/generations -H "Authorization: Bearer {key}" \
    -H "Content-Type: application/json" \
    -d '{{"model":"alpha2.6-t2v_t2v","prompt":"a red fox running through snow at dawn","duration":5}}'

Poll it (use the task_id from the answer), download its result, list your tasks:
  curl -s {url}/v1/tasks/TASK_ID -H "Authorization: Bearer {key}"
  curl -s {url}/v1/tasks/TASK_ID/content -H "Authorization: Bearer {key}" -o result.mp4
  curl -s {url}/v1/tasks -H "Authorization: Bearer {key}"

Or have its end sent to you: add "callback_url":"http://127.0.0.1:PORT/..." to the job; deliveries are
signed with the webhook secret {webhook_secret}

List models:  curl -s {url}/v1/models -H "Authorization: Bearer {key}"

Console: {url}/console (a client signs in with the API key, an operator with the admin token: {admin_token})
Per-request log lines: --access-log or MEDIAGATE_LOG=info."#
    );
}
