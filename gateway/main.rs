//! The `mediagate` command: the gateway, the demo stack, the simulator and the operator tools.

use clap::{Args, Parser, Subcommand};
use mediagate::config::Config;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "mediagate",
    version,
    about = "A spec-driven gateway in front of media-generation models"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the gateway.
    Serve(ServeArgs),
    /// Manage API keys directly in a data dir (the gateway may be stopped).
    Keys {
        #[command(subcommand)]
        command: KeysCommand,
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
            actix_web::rt::System::new()
                .block_on(mediagate::server::serve(config))
                .map_err(|e| e.to_string())
        }
        Command::Keys {
            command: KeysCommand::Create { account, data_dir },
        } => {
            let store = mediagate::store::Store::open(&data_dir).map_err(|e| e.to_string())?;
            let key = store.create_key(&account).map_err(|e| e.to_string())?;
            println!("{key}");
            Ok(())
        }
        Command::Schemas { out } => {
            mediagate::catalog::write_schemas(&out).map_err(|e| e.to_string())
        }
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
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .json()
        .init();
}
