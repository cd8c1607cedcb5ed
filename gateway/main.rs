//! The `mediagate` command: the gateway, the demo stack, the simulator and the operator tools.

use clap::{Args, Parser, Subcommand};
use mediagate::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: the request path allocates many small short-lived objects, where glibc malloc's
/// consolidation showed up at over a tenth of the gateway's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[derive(Parser)]
#[command(name = "mediagate", version, about = "A spec-driven gateway in front of media-generation models")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Run the gateway and a simulated upstream in one process, on an embedded store: no other service.
    Demo(DemoArgs),
    /// Run the upstream simulator alone (upstream-protocol.md), one base URL per region under it.
    Simulate(SimulateArgs),
    /// Manage API keys directly in a data dir (the gateway may be stopped).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Back-office jobs through the admin API of a running gateway.
    Admin {
        /// The gateway's address.
        #[arg(long, default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The admin token.
        #[arg(long, env = "MEDIAGATE_ADMIN_TOKEN", hide_env_values = true)]
        token: String,
        #[command(subcommand)]
        command: mediagate::admin_client::AdminCommand,
    },
    /// Check a stopped gateway's ledger directly in its data dir.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// Write every operation schema, every model schema and openapi.json for client teams.
    Schemas {
        #[arg(long)]
        out: PathBuf,
    },
}

#[derive(Args)]
struct ServeArgs {
    /// YAML config; without one every setting takes its default.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address to listen on; overrides the config.
    #[arg(long)]
    listen: Option<SocketAddr>,
    /// Directory of the store; overrides the config.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(Args)]
struct DemoArgs {
    /// YAML config for everything but address, data dir and upstreams.
    #[arg(long)]
    config: Option<PathBuf>,
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[arg(long, default_value = "./mediagate-demo")]
    data_dir: PathBuf,
    /// The demo account's key; a random one is made (and kept in the data dir) when absent.
    #[arg(long)]
    api_key: Option<String>,
    /// Multiplies the simulator's job durations (1.0: a few seconds per job; 0 answers at once).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
}

#[derive(Args)]
struct SimulateArgs {
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// Where the simulator keeps its tasks; in memory when absent.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// The API key accepted in every region is `<key-prefix>-<region>`.
    #[arg(long, default_value = "sim-key")]
    key_prefix: String,
    /// Keys per region: the first is `<key-prefix>-<region>`, the others `<key-prefix>-<region>-<n>` (n from 2),
    /// each with its own query limit, as separate upstream accounts have.
    #[arg(long, default_value_t = 1)]
    keys: usize,
    /// Task queries (and lists) per second per key; 0 is unlimited.
    #[arg(long, default_value_t = 20.0)]
    query_qps: f64,
}

/// The simulator's keys of `region`: `<prefix>-<region>`, then `<prefix>-<region>-2`, ...
fn simulator_keys(prefix: &str, region: &str, count: usize) -> Vec<String> {
    (1..=count.max(1))
        .map(|n| if n == 1 { format!("{prefix}-{region}") } else { format!("{prefix}-{region}-{n}") })
        .collect()
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Every balance must equal the sum of its entries, and no pot may be negative.
    Verify {
        #[arg(long)]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key for an account (created if new) and print it, once, on its own line.
    Create {
        #[arg(long)]
        account: String,
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    init_logging();
    match run(Cli::parse()) {
        Ok(()) => ExitCode::SUCCESS,
        Err(message) => {
            eprintln!("mediagate: {message}");
            ExitCode::FAILURE
        }
    }
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.command {
        Command::Serve(args) => {
            let config = load_config(&args)?;
            let upstreams = mediagate::upstream::Upstreams::from_config(&config)?;
            let listener = mediagate::server::bind(&config).map_err(|e| format!("bind {}: {e}", config.listen))?;
            let state = mediagate::server::build_state(config, upstreams).map_err(|e| e.to_string())?;
            if let Ok(addr) = listener.local_addr() {
                println!("mediagate listening on http://{addr}");
            }
            actix_web::rt::System::new()
                .block_on(mediagate::server::run(state, listener, |_: &mut actix_web::web::ServiceConfig| {}))
                .map_err(|e| e.to_string())
        }
        Command::Demo(args) => mediagate::demo::run(mediagate::demo::DemoOptions {
            config: match &args.config {
                Some(path) => Config::load(path)?,
                None => Config::default(),
            },
            listen: args.listen,
            data_dir: args.data_dir,
            api_key: args.api_key,
            time_scale: args.time_scale,
        }),
        Command::Simulate(args) => {
            let keys = mediagate::catalog::REGIONS
                .iter()
                .map(|r| (r.to_string(), simulator_keys(&args.key_prefix, r, args.keys)))
                .collect();
            let config = mediagate::simulator::SimulatorConfig {
                time_scale: args.time_scale,
                keys,
                data_dir: args.data_dir,
                public_base: format!("http://{}", args.listen),
                query_qps: (args.query_qps > 0.0).then_some(args.query_qps),
            };
            println!(
                "simulator listening on http://{}; keys: {}-<region> (then -2, -3, ...), {} per region",
                args.listen, args.key_prefix, args.keys
            );
            actix_web::rt::System::new()
                .block_on(mediagate::simulator::serve(args.listen, config))
                .map_err(|e| e.to_string())
        }
        Command::Keys { command: KeysCommand::Create { account, data_dir } } => {
            let store = mediagate::store::Store::open(&data_dir).map_err(|e| e.to_string())?;
            let key = store.create_key(&account).map_err(|e| e.to_string())?;
            println!("{key}");
            Ok(())
        }
        Command::Admin { url, token, command } => mediagate::admin_client::run(&url, &token, command),
        Command::Ledger { command: LedgerCommand::Verify { data_dir } } => {
            let store = mediagate::store::Store::open(&data_dir).map_err(|e| e.to_string())?;
            let report = store.verify_ledger().map_err(|e| e.to_string())?;
            println!("{}", serde_json::to_string_pretty(&report).unwrap_or_default());
            if report.problems.is_empty() { Ok(()) } else { Err("the ledger does not verify".into()) }
        }
        Command::Schemas { out } => mediagate::catalog::write_schemas(&out).map_err(|e| e.to_string()),
    }
}

fn load_config(args: &ServeArgs) -> Result<Config, String> {
    let mut config = match &args.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(listen) = args.listen {
        config.listen = listen;
    }
    if let Some(dir) = &args.data_dir {
        config.data_dir = dir.clone();
    }
    Ok(config)
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("MEDIAGATE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr).json().init();
}
