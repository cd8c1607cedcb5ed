//! The `mediagate` command: the gateway, the demo stack, the simulator and the operator tools.

use clap::{Args, Parser, Subcommand};
use mediagate::app::config::Config;
use mediagate::edges::schemas;
use std::fmt::Display;
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

/// mimalloc: the request path allocates many small short-lived objects, where glibc malloc's
/// consolidation showed up at over a tenth of the gateway's CPU.
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// The environment variable the admin token is read from, by the gateway and by `mediagate admin`.
const ADMIN_TOKEN_ENV: &str = "MEDIAGATE_ADMIN_TOKEN";

#[derive(Parser)]
#[command(
    name = "mediagate",
    version,
    about = "A spec-driven gateway in front of media-generation models",
    after_help = "Logs are JSON lines on stderr; MEDIAGATE_LOG sets their filter (e.g. `debug`, or \
                  `info,mediagate::access=off` to drop the per-request lines)."
)]
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
    /// Run the upstream simulator alone (docs/upstream-protocol.md), one base URL per region under it.
    Simulate(SimulateArgs),
    /// Manage API keys directly in a data dir (the gateway must be stopped).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
    },
    /// Back-office jobs through the admin API of a running gateway.
    Admin {
        /// The gateway's address (`https://` is verified like the gateway verifies its upstreams).
        #[arg(long, env = "MEDIAGATE_URL", default_value = "http://127.0.0.1:8080")]
        url: String,
        /// The admin token (root's) or an operator's token (`admin operator create`); by default
        /// MEDIAGATE_ADMIN_TOKEN.
        #[arg(long, env = ADMIN_TOKEN_ENV, hide_env_values = true)]
        token: Option<String>,
        /// A PEM file of CA certificates trusted besides the system's (SSL_CERT_FILE also works).
        #[arg(long)]
        ca_file: Option<PathBuf>,
        #[command(subcommand)]
        command: mediagate::edges::cli::AdminCommand,
    },
    /// Check a stopped gateway's ledger directly in its data dir.
    Ledger {
        #[command(subcommand)]
        command: LedgerCommand,
    },
    /// Move a store from one backend to another.
    Store {
        #[command(subcommand)]
        command: StoreCommand,
    },
    /// Apply the database schema's migrations to PostgreSQL (`serve` applies them too, at start).
    Migrate {
        /// The database (`postgres://user:password@host:port/dbname`).
        #[arg(long, env = "MEDIAGATE_DATABASE_URL", hide_env_values = true)]
        database_url: String,
        /// A PEM file of CA certificates trusted for the database's TLS, besides the system's.
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
    /// The published contract for client teams: write it (`--out DIR`), lock it, or diff two releases.
    #[command(args_conflicts_with_subcommands = true)]
    Schemas {
        /// Write every operation schema, every model schema and openapi.json into this directory (created if
        /// missing).
        #[arg(long)]
        out: Option<PathBuf>,
        #[command(subcommand)]
        action: Option<SchemasCommand>,
    },
}

#[derive(Subcommand)]
enum SchemasCommand {
    /// Write SPEC/published.lock.json, the contract the build holds the spec to; refused while a breaking
    /// change is not recorded in SPEC/compatibility.yaml.
    Lock {
        /// The spec directory.
        #[arg(long, default_value = "spec")]
        spec: PathBuf,
    },
    /// Print the breaking and the compatible changes from OLD to NEW (an OpenAPI file, a directory holding
    /// openapi.json or published.lock.json, or a running gateway's URL); exit 1 if any is breaking.
    Diff {
        /// The older release.
        old: String,
        /// The newer release.
        new: String,
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
    /// Run on PostgreSQL (`postgres://user:password@host:port/dbname`) instead of the embedded store;
    /// overrides the config's `store.url`.
    #[arg(long, env = "MEDIAGATE_DATABASE_URL", hide_env_values = true)]
    database_url: Option<String>,
}

#[derive(Args)]
struct DemoArgs {
    /// YAML config for everything but address, data dir and upstreams.
    #[arg(long)]
    config: Option<PathBuf>,
    /// Address of the gateway (and, without --upstream-tls, of the simulator under /upstream).
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    /// Directory of the gateway's and the simulator's stores, and of the demo's key.
    #[arg(long, default_value = "./mediagate-demo")]
    data_dir: PathBuf,
    /// The demo account's key; a random one is made (and kept in the data dir) when absent.
    #[arg(long)]
    api_key: Option<String>,
    /// Multiplies the simulator's job durations (1.0: a few seconds per job; 0 answers at once).
    #[arg(long, default_value_t = 1.0)]
    time_scale: f64,
    /// Serve the simulator over HTTPS on a port of its own, with a CA made at start, and reach it as a
    /// real upstream: verified, pooled, kept alive.
    #[arg(long)]
    upstream_tls: bool,
    /// Log every request as a JSON line on stderr (also: MEDIAGATE_LOG=info).
    #[arg(long)]
    access_log: bool,
}

#[derive(Args)]
struct SimulateArgs {
    /// Address to listen on; each region's base URL is `<address>/<region>`.
    #[arg(long, default_value = "127.0.0.1:9090")]
    listen: SocketAddr,
    /// Where the simulator keeps its tasks; in memory when absent.
    #[arg(long)]
    data_dir: Option<PathBuf>,
    /// Multiplies every simulated duration (1.0: a few seconds per job; 0 answers at once).
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
    /// Tasks pending or running at once per key and model, for every model [default: the simulator's
    /// figures, 2 for the VACE models and 5 for the others].
    #[arg(long)]
    concurrency: Option<u32>,
    /// Creates per second per key; 0 is unlimited.
    #[arg(long, default_value_t = 0)]
    create_qps: u32,
    /// Serve HTTPS with a certificate made at start, signed by a new CA written to --ca-out.
    #[arg(long)]
    tls: bool,
    /// Where --tls writes its CA certificate (PEM) [default: <data-dir>/simulator-ca.pem, else in the
    /// system's temporary directory].
    #[arg(long, requires = "tls")]
    ca_out: Option<PathBuf>,
}

/// The simulator's keys of `region`: `<prefix>-<region>`, then `<prefix>-<region>-2`, ...
fn simulator_keys(prefix: &str, region: &str, count: usize) -> Vec<String> {
    (1..=count.max(1))
        .map(|n| if n == 1 { format!("{prefix}-{region}") } else { format!("{prefix}-{region}-{n}") })
        .collect()
}

#[derive(Subcommand)]
enum StoreCommand {
    /// Copy a stopped gateway's embedded store into an empty PostgreSQL database: accounts, keys (still
    /// hashed), the ledger, tasks, idempotency records and model switches; both ledgers are verified.
    Copy {
        /// The embedded store's directory (the gateway's `data_dir`).
        #[arg(long)]
        from_data_dir: PathBuf,
        /// The database (`postgres://user:password@host:port/dbname`).
        #[arg(long)]
        to: String,
        /// A PEM file of CA certificates trusted for the database's TLS, besides the system's.
        #[arg(long)]
        ca_file: Option<PathBuf>,
    },
}

#[derive(Subcommand)]
enum LedgerCommand {
    /// Every pot must equal the sum of its entries, and none may be negative (for a running gateway, use
    /// `mediagate admin verify-ledger`).
    Verify {
        /// The stopped gateway's data dir.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

#[derive(Subcommand)]
enum KeysCommand {
    /// Create a key for an account (created if new) and print it, once, on its own line.
    Create {
        /// The account's name.
        #[arg(long)]
        account: String,
        /// The stopped gateway's data dir.
        #[arg(long)]
        data_dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let traces = match init_logging(&cli.command) {
        Ok(traces) => traces,
        Err(message) => {
            eprintln!("mediagate: {message}");
            return ExitCode::FAILURE;
        }
    };
    let result = run(cli);
    if let Some(traces) = traces {
        traces.shutdown();
    }
    match result {
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
            let mut config = load_config(&args)?;
            let upstreams =
                mediagate::adapters::upstream::Upstreams::from_config(&config.upstreams, &config.model_regions)?;
            for (region, models) in upstreams.unserved() {
                tracing::warn!(
                    region,
                    config_key = format!("upstreams.{region}"),
                    models = models.join(", "),
                    "no upstream is configured for this region: its models answer 503 until the config sets one"
                );
            }
            let listener = mediagate::app::server::bind(&config).map_err(|e| format!("bind {}: {e}", config.listen))?;
            let bound = listener.local_addr().map_err(|e| format!("bind {}: {e}", config.listen))?;
            // The port the system chose for `:0`: result links name the address clients reach.
            config.listen = bound;
            let url = mediagate::app::server::public_url(&config, bound);
            mediagate::app::server::system().block_on(async move {
                let wired = mediagate::app::server::wire(config, upstreams).await.map_err(|e| e.to_string())?;
                print(format!("mediagate listening on {url}"))?;
                let no_routes = |_: &mut actix_web::web::ServiceConfig| {};
                mediagate::app::server::run(wired, listener, no_routes).await.map_err(|e| e.to_string())
            })
        }
        Command::Demo(args) => mediagate::app::demo::run(mediagate::app::demo::DemoOptions {
            config: match &args.config {
                Some(path) => Config::load(path)?,
                None => Config::default(),
            },
            listen: args.listen,
            data_dir: args.data_dir,
            api_key: args.api_key,
            time_scale: args.time_scale,
            upstream_tls: args.upstream_tls,
        }),
        Command::Simulate(args) => simulate(args),
        Command::Keys { command: KeysCommand::Create { account, data_dir } } => {
            let store = mediagate::adapters::store::embedded::Store::open(&data_dir).map_err(|e| e.to_string())?;
            let key = actix_web::rt::System::new().block_on(store.create_key(&account)).map_err(|e| e.to_string())?;
            print(key)
        }
        Command::Admin { url, token, ca_file, command } => {
            let token = token.ok_or_else(|| {
                format!("no admin token: set {ADMIN_TOKEN_ENV} to the gateway's admin token, or pass --token")
            })?;
            let usage = matches!(command, mediagate::edges::cli::AdminCommand::Usage { .. });
            let answer = mediagate::edges::cli::run(&url, &token, ca_file.as_deref(), command)?;
            // JSON lines end with a newline of their own.
            let body = answer.body.trim_end_matches('\n');
            if !body.is_empty() {
                print(body)?;
            }
            // The usage log is printed for a pipe or a file: that it is empty goes to the terminal instead (a
            // CSV keeps its header line, `at,...`).
            let no_lines = || answer.body.lines().all(|l| l.trim().is_empty() || l.starts_with("at,"));
            if usage && answer.is_success() && no_lines() {
                eprintln!("No usage lines: no settled task matches (a task has a line once it has ended).");
            }
            if answer.is_success() { Ok(()) } else { Err(format!("the admin API answered {}", answer.status)) }
        }
        Command::Ledger { command: LedgerCommand::Verify { data_dir } } => {
            let store = mediagate::adapters::store::embedded::Store::open(&data_dir).map_err(|e| e.to_string())?;
            let verified =
                actix_web::rt::System::new().block_on(mediagate::ports::storage::Ledger::verify_ledger(&store));
            let report = verified.map_err(|e| e.to_string())?;
            print(serde_json::to_string_pretty(&report).unwrap_or_default())?;
            if report.problems.is_empty() { Ok(()) } else { Err("the ledger does not verify".into()) }
        }
        Command::Store { command: StoreCommand::Copy { from_data_dir, to, ca_file } } => {
            let options = mediagate::adapters::store::postgres::Options::new(to, ca_file);
            let copied = actix_web::rt::System::new()
                .block_on(mediagate::adapters::store::copy::copy(&from_data_dir, options))
                .map_err(|e| e.to_string())?;
            print(serde_json::to_string_pretty(&copied).unwrap_or_default())
        }
        Command::Migrate { database_url, ca_file } => {
            let options = mediagate::adapters::store::postgres::Options::new(database_url, ca_file);
            let applied = actix_web::rt::System::new()
                .block_on(mediagate::adapters::store::postgres::migrate(options))
                .map_err(|e| e.to_string())?;
            print(format!("{applied} migration(s) applied; the schema is current"))
        }
        Command::Schemas { out: Some(out), .. } => {
            let written = schemas::write(&out).map_err(|e| e.to_string())?;
            print(format_args!("Wrote {written} files to {}: operations/, models/ and openapi.json.", out.display()))
        }
        Command::Schemas { action: Some(SchemasCommand::Lock { spec }), .. } => print(schemas::lock(&spec)?),
        Command::Schemas { action: Some(SchemasCommand::Diff { old, new }), .. } => {
            let (said, breaking) = schemas::diff(&old, &new)?;
            print(said)?;
            if breaking {
                std::process::exit(1);
            }
            Ok(())
        }
        Command::Schemas { out: None, action: None } => {
            Err("say what to do: `schemas --out DIR`, `schemas lock` or `schemas diff OLD NEW`.".into())
        }
    }
}

fn simulate(args: SimulateArgs) -> Result<(), String> {
    let keys = mediagate::domain::catalog::REGIONS
        .iter()
        .map(|r| (r.to_string(), simulator_keys(&args.key_prefix, r, args.keys)))
        .collect();
    let listener = std::net::TcpListener::bind(args.listen).map_err(|e| format!("bind {}: {e}", args.listen))?;
    let addr = listener.local_addr().map_err(|e| e.to_string())?;
    let tls = if args.tls {
        let ca_out = args.ca_out.clone().unwrap_or_else(|| match &args.data_dir {
            Some(dir) => dir.join("simulator-ca.pem"),
            None => std::env::temp_dir().join(format!("mediagate-simulator-{}-ca.pem", addr.port())),
        });
        Some((mediagate::app::simulator::tls::generate(&ca_out)?, ca_out))
    } else {
        None
    };
    let public_base = format!("{}://{addr}", if tls.is_some() { "https" } else { "http" });
    let config = mediagate::app::simulator::SimulatorConfig {
        time_scale: args.time_scale,
        keys,
        data_dir: args.data_dir,
        public_base,
        query_qps: (args.query_qps > 0.0).then_some(args.query_qps),
        concurrency: args.concurrency,
        create_qps: (args.create_qps > 0).then_some(args.create_qps),
    };
    let simulator = std::sync::Arc::new(mediagate::app::simulator::Simulator::open(config)?);
    print(simulator_banner(&simulator, &args.key_prefix, args.keys, tls.as_ref().map(|(_, path)| path)))?;
    actix_web::rt::System::new()
        .block_on(async move {
            mediagate::app::simulator::server(simulator, listener, tls.map(|(config, _)| config))?.await
        })
        .map_err(|e| e.to_string())
}

/// Each region's base URL and keys, and a config that wires `mediagate serve` to them.
fn simulator_banner(
    simulator: &mediagate::app::simulator::Simulator,
    key_prefix: &str,
    keys: usize,
    ca_file: Option<&PathBuf>,
) -> String {
    let mut text = format!("mediagate simulator listening on {}\n", simulator.public_base());
    if let Some(path) = ca_file {
        text.push_str(&format!("CA certificate: {} (trust it with SSL_CERT_FILE or `ca_file`)\n", path.display()));
    }
    // Per region: its base URL, its keys, and the variable the config below reads them from.
    let regions: Vec<(&str, String, String, String)> = mediagate::domain::catalog::REGIONS
        .iter()
        .map(|region| {
            let env = format!("SIM_KEY_{}", region.to_uppercase().replace('-', "_"));
            (*region, simulator.region_base_url(region), simulator_keys(key_prefix, region, keys).join(","), env)
        })
        .collect();
    text.push_str("\nRegions:\n");
    for (region, base, keys, _) in &regions {
        text.push_str(&format!("  {region:<16} {base}  keys: {keys}\n"));
    }
    text.push_str("\nA gateway config for it (mediagate serve --config FILE), with the keys in the environment:\n");
    text.push_str("upstreams:\n");
    for (region, base, _, env) in &regions {
        text.push_str(&format!("  {region}: {{base_url: {base}, api_key_env: {env}}}\n"));
    }
    let exports: Vec<String> = regions.iter().map(|(_, _, keys, env)| format!("{env}={keys}")).collect();
    text.push_str(&format!("\nexport {}", exports.join(" ")));
    text
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
    if let Some(url) = &args.database_url {
        config.store.url = Some(url.clone());
    }
    Ok(config)
}

/// Prints a line on stdout. A reader that stopped reading (`| head`) ends the process quietly: what it
/// wanted it has.
fn print(text: impl Display) -> Result<(), String> {
    match writeln!(std::io::stdout().lock(), "{text}") {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::BrokenPipe => std::process::exit(0),
        Err(e) => Err(format!("stdout: {e}")),
    }
}

/// JSON lines on stderr, filtered by MEDIAGATE_LOG. The demo keeps its terminal for its banner: it logs
/// warnings only, unless asked for every request. Beside them, the jobs' traces when the OTLP variables ask
/// for them (`support::telemetry`); their spans never reach the log.
fn init_logging(command: &Command) -> Result<Option<mediagate::support::telemetry::Exporting>, String> {
    use mediagate::support::telemetry;
    use tracing_subscriber::prelude::*;
    let default = match command {
        Command::Demo(args) if !args.access_log => "warn",
        _ => "info",
    };
    let asked = std::env::var("MEDIAGATE_LOG").ok().filter(|v| !v.trim().is_empty());
    let filter = asked
        .and_then(|v| tracing_subscriber::EnvFilter::try_new(format!("{v},{}=off", telemetry::TARGET)).ok())
        .unwrap_or_else(|| tracing_subscriber::EnvFilter::new(format!("{default},{}=off", telemetry::TARGET)));
    let log = tracing_subscriber::fmt::layer().with_writer(std::io::stderr).json().with_filter(filter);
    let traced = tracing_subscriber::filter::Targets::new().with_target(telemetry::TARGET, tracing::Level::INFO);
    let (traces, exporting) = match telemetry::layer()? {
        Some((layer, exporting)) => (Some(layer.with_filter(traced)), Some(exporting)),
        None => (None, None),
    };
    tracing_subscriber::registry().with(log).with(traces).init();
    Ok(exporting)
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    /// Every subcommand, flag and argument a newcomer can reach in `--help`, without a line of help.
    fn unexplained(command: &clap::Command, path: &str, out: &mut Vec<String>) {
        for arg in command.get_arguments() {
            let builtin = matches!(arg.get_id().as_str(), "help" | "version");
            if !builtin && arg.get_help().is_none() && arg.get_long_help().is_none() {
                out.push(format!("{path} {}", arg.get_id()));
            }
        }
        for sub in command.get_subcommands().filter(|s| s.get_name() != "help") {
            let path = format!("{path} {}", sub.get_name());
            if sub.get_about().is_none() {
                out.push(path.clone());
            }
            unexplained(sub, &path, out);
        }
    }

    #[test]
    fn every_subcommand_and_flag_has_a_help_line() {
        Cli::command().debug_assert();
        let mut missing = Vec::new();
        unexplained(&Cli::command(), "mediagate", &mut missing);
        assert!(missing.is_empty(), "without help: {missing:#?}");
    }
}
