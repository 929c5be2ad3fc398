//! The `roughnet-agent` command line: parse arguments, read the configuration,
//! run the role, and turn every failure into a JSON `error` line and an exit
//! code (2 configuration, 1 runtime).  The only place that uses anyhow.

use std::io::Read as _;
use std::process::ExitCode;

use anyhow::Context as _;
use clap::{Args, Parser, Subcommand};
use serde_json::json;

use roughnet_agent::config::{Config, ConfigError, PATTERNS};
use roughnet_agent::drivers::{self, build_kind, missing_protocols, DriverError, PROTOCOLS};
use roughnet_agent::patterns::{self, PatternError};
use roughnet_agent::{clock, host, output, signals, AGENT_VERSION};

#[derive(Parser)]
#[command(
    name = "roughnet-agent",
    version,
    about = "roughnet's measurement agent: one protocol role per process (or several flows: host), JSON lines on stdout"
)]
struct Cli {
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Subcommand)]
enum Cmd {
    /// Print the agent version, protocols (the drivers built), missing drivers and patterns as one JSON line.
    Version,
    /// Run one role of one pattern, configured by a JSON object (docs/agent-protocol.md).
    Run(RunArgs),
    /// Run several flows (each one role of one pattern) in this process; commands on stdin
    /// (docs/agent-protocol.md, "Host mode").
    Host(HostArgs),
    /// Run a zenoh router in this process (the `zenoh-router` service) until SIGTERM/SIGINT.
    Router(RouterArgs),
}

#[derive(Args)]
struct RouterArgs {
    /// Zenoh endpoint to listen on, e.g. tcp/198.18.0.1:7447 (repeatable).
    #[arg(long, value_name = "ENDPOINT", required = true)]
    listen: Vec<String>,
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct RunArgs {
    /// File holding the configuration object ("-" reads standard input).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// The configuration object itself.
    #[arg(long, value_name = "JSON")]
    config_json: Option<String>,
}

#[derive(Args)]
#[group(required = true, multiple = false)]
struct HostArgs {
    /// File holding the host object (not "-": standard input carries the commands).
    #[arg(long, value_name = "FILE")]
    config: Option<String>,
    /// The host object itself.
    #[arg(long, value_name = "JSON")]
    config_json: Option<String>,
}

/// What the agent can run, as `version` says.
const MODES: [&str; 2] = ["run", "host"];

const EXIT_RUNTIME: u8 = 1;
const EXIT_CONFIG: u8 = 2;

fn read_config(args: &RunArgs) -> Result<String, ConfigError> {
    if let Some(j) = &args.config_json {
        return Ok(j.clone());
    }
    let path = args
        .config
        .as_deref()
        .expect("clap requires --config or --config-json");
    if path == "-" {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .map_err(|e| ConfigError::Read {
                path: "standard input".into(),
                source: e,
            })?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            path: path.into(),
            source: e,
        })
    }
}

fn run(args: &RunArgs) -> anyhow::Result<()> {
    let text = read_config(args)?;
    let cfg = Config::parse(&text)?;
    let driver = drivers::create(&cfg)?;
    signals::install().context("installing the SIGTERM/SIGINT handler")?;
    clock::tighten_timer_slack();
    tracing::info!(
        role = cfg.role.as_str(),
        pattern = cfg.pattern.as_str(),
        protocol = driver.name(),
        "starting"
    );
    patterns::run(&cfg, driver.as_ref())?;
    Ok(())
}

/// Host mode: check every flow and create its driver, then run them all (crate::host); the
/// exit code.  A configuration error prints one error line (naming its flow) and starts nothing.
fn host(args: &HostArgs) -> ExitCode {
    let text = match (&args.config_json, args.config.as_deref()) {
        (Some(j), _) => j.clone(),
        (None, Some("-")) => {
            return config_failure(
                None,
                "--config -: host mode reads its commands from standard input; \
                 give the host object with --config FILE or --config-json JSON",
            )
        }
        (None, Some(path)) => match std::fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) => {
                let e = ConfigError::Read {
                    path: path.into(),
                    source: e,
                };
                return config_failure(None, &host::describe(&e));
            }
        },
        (None, None) => unreachable!("clap requires --config or --config-json"),
    };
    let flows = match host::parse(&text) {
        Ok(f) => f,
        Err(e) => return config_failure(e.flow(), &host::describe(&e)),
    };
    if let Err(e) = signals::install() {
        let message = format!("installing the SIGTERM/SIGINT handler: {e}");
        tracing::error!("{message}");
        output::error("io", &message);
        return ExitCode::from(EXIT_RUNTIME);
    }
    clock::tighten_timer_slack(); // before the flows' threads: they inherit it
    tracing::info!(flows = flows.len(), "host starting");
    let failed = host::run(flows, std::io::BufReader::new(std::io::stdin()));
    if failed == 0 {
        ExitCode::SUCCESS
    } else {
        tracing::warn!("{failed} flow(s) failed");
        ExitCode::from(EXIT_RUNTIME)
    }
}

/// A configuration error line (for `flow` if it is about one) and the configuration exit code.
fn config_failure(flow: Option<u32>, message: &str) -> ExitCode {
    tracing::error!("{message}");
    match flow {
        Some(k) => output::with_flow(k, || output::error("config", message)),
        None => output::error("config", message),
    }
    ExitCode::from(EXIT_CONFIG)
}

/// Map a failure to (kind, exit code) for the error line.
fn classify(e: &anyhow::Error) -> (&'static str, u8) {
    if e.downcast_ref::<ConfigError>().is_some() {
        return ("config", EXIT_CONFIG);
    }
    let driver_err = e.downcast_ref::<PatternError>().and_then(|p| match p {
        PatternError::Driver(d) => Some(d),
        PatternError::Protocol(_) => None,
    });
    match (e.downcast_ref::<PatternError>(), driver_err) {
        (_, Some(DriverError::Protocol { .. } | DriverError::TooLarge { .. })) => {
            ("protocol", EXIT_RUNTIME)
        }
        (Some(PatternError::Protocol(_)), _) => ("protocol", EXIT_RUNTIME),
        _ => ("io", EXIT_RUNTIME),
    }
}

/// The error and its causes in one line, without repeating a cause that a
/// message already quotes (our error types print their source inline).
fn describe(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for part in e.chain().map(|c| c.to_string()) {
        if !out.contains(&part) {
            if !out.is_empty() {
                out.push_str(": ");
            }
            out.push_str(&part);
        }
    }
    out
}

/// The zenoh router (`roughnet-agent router`); refused naming the driver in a build without zenoh.
#[cfg(feature = "zenoh")]
fn router(args: &RouterArgs) -> ExitCode {
    let r = signals::install()
        .context("installing the SIGTERM/SIGINT handler")
        .and_then(|_| Ok(drivers::zenoh::run_router(&args.listen)?));
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let message = describe(&e);
            tracing::error!("{message}");
            output::error("io", &message);
            ExitCode::from(EXIT_RUNTIME)
        }
    }
}

#[cfg(not(feature = "zenoh"))]
fn router(_args: &RouterArgs) -> ExitCode {
    let e = drivers::missing_driver("zenoh").expect("zenoh is a known driver");
    tracing::error!("{e}");
    output::error("config", &e.to_string());
    ExitCode::from(EXIT_CONFIG)
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_env("RUST_LOG")
                .unwrap_or_else(|_| "warn".into()),
        )
        .init();
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(
                e.kind(),
                ErrorKind::DisplayHelp
                    | ErrorKind::DisplayVersion
                    | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand
            ) {
                let _ = e.print();
                return ExitCode::SUCCESS;
            }
            output::error("config", &format!("bad command line: {}", e.kind()));
            let _ = e.print();
            return ExitCode::from(EXIT_CONFIG);
        }
    };
    match cli.cmd {
        Cmd::Version => {
            output::emit(
                "version",
                json!({"agent": AGENT_VERSION, "protocols": PROTOCOLS, "patterns": PATTERNS,
                       "build": build_kind(), "missing": missing_protocols(), "modes": MODES}),
            );
            ExitCode::SUCCESS
        }
        Cmd::Router(args) => router(&args),
        Cmd::Host(args) => host(&args),
        Cmd::Run(args) => match run(&args) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                let (kind, code) = classify(&e);
                let message = describe(&e);
                tracing::error!("{message}");
                output::error(kind, &message);
                ExitCode::from(code)
            }
        },
    }
}
