//! roughnet-wire: the userspace link emulator binary (a two-interface link, or a shared segment of N ports). It owns the command line, startup (configuration,
//! sockets, control socket), the JSON lines on stdout (`ready`, final `stats`, `error`) and exit codes
//! (0 ok, 1 runtime failure, 2 bad configuration). Forwarding is `forward`, sockets are `packet`,
//! impairments are the `roughnet-wire-core` crate. See docs/wire.md.

mod clock;
mod control;
mod core;
mod errors;
mod forward;
mod handoff;
mod packet;
mod report;
mod split;

use std::io::{Read, Write};
use std::path::PathBuf;

use clap::Parser;
use roughnet_wire_core::{parse_mac, Emulator, LinkConfig, Mac, Segment, MAX_PORTS};
use serde_json::Value;

use crate::errors::WireError;
use crate::report::{error_line, ready_line, PortInfo, WireInfo};

/// Highest SCHED_FIFO priority accepted (kept below the kernel's own threads at 50 and up).
const MAX_REALTIME_PRIORITY: i32 = 49;

/// Longest spin accepted: past a few ms spinning only burns the CPU the endpoints need.
const MAX_SPIN_US: u64 = 10_000;

/// Userspace link emulator: forwards Ethernet frames between two interfaces (a link) or among N (a
/// shared segment) through roughnet's impairment pipeline (delay, jitter, loss models, rate, queue, half
/// duplex, schedules).
#[derive(Parser, Debug)]
#[command(name = "roughnet-wire", version)]
struct Args {
    /// Interface towards side A (frames arriving here travel a_to_b).
    #[arg(long = "if-a", value_name = "IFNAME", help_heading = "Link", requires = "if_b",
          required_unless_present = "port")]
    if_a: Option<String>,
    /// Interface towards side B (frames arriving here travel b_to_a).
    #[arg(long = "if-b", value_name = "IFNAME", help_heading = "Link", requires = "if_a")]
    if_b: Option<String>,
    /// A port of a shared segment: the interface towards one host, and that host's MAC (unicast to it
    /// leaves only here; without the MAC the host is reached by flooding only). Repeat for every host
    /// (2 to 254); instead of --if-a/--if-b. Two ports are served as a link (the first is A, the second B).
    #[arg(long = "port", value_name = "IFNAME[=MAC]", help_heading = "Link", conflicts_with_all = ["if_a", "if_b"])]
    port: Vec<String>,
    /// Link configuration, one JSON object (roughnet-wire-core's LinkConfig); "-" reads stdin.
    #[arg(long, value_name = "FILE", help_heading = "Link", required_unless_present = "profile",
          conflicts_with = "profile")]
    config: Option<PathBuf>,
    /// A named link profile of roughnet-wire-core instead of --config (ethernet-1g, wifi-good, ...).
    #[arg(long, value_name = "NAME", help_heading = "Link")]
    profile: Option<String>,
    /// Seed of every random decision (same seed and same frames give the same decisions).
    #[arg(long, value_name = "N", help_heading = "Link")]
    seed: u64,
    /// Unix stream socket for run-time commands (stats, set, down, up), one JSON object per line.
    #[arg(long, value_name = "PATH", help_heading = "Reporting")]
    control: Option<PathBuf>,
    /// Also write the final stats line (JSON) to this file at exit.
    #[arg(long = "stats-out", value_name = "FILE", help_heading = "Reporting")]
    stats_out: Option<PathBuf>,
    /// Busy-wait instead of sleeping when the next departure is closer than this (kernel wakeups are
    /// 45-180 us late on small VMs).
    #[arg(long = "spin-us", value_name = "US", default_value_t = 100, help_heading = "Timing")]
    spin_us: u64,
    /// Most of the wall time the loop may spend spinning, in percent (counted per 10 ms); past it the loop
    /// sleeps until each due time instead, leaving the CPU to the endpoints under heavy traffic.
    #[arg(long = "spin-budget", value_name = "PERCENT", default_value_t = 20, help_heading = "Timing")]
    spin_budget: u64,
    /// After a frame, keep polling the sockets this long before sleeping (within --spin-budget): saves the
    /// kernel wakeup when a reply or the next frame follows closely (issue 17; 0 = off).
    #[arg(long = "busy-poll-us", value_name = "US", default_value_t = 50, help_heading = "Timing")]
    busy_poll_us: u64,
    /// Run the loop under SCHED_FIFO at this priority (0 = ordinary scheduling). On a busy machine ordinary
    /// scheduling lets wakeups come milliseconds late; see docs/wire.md.
    #[arg(long = "realtime", value_name = "PRIO", default_value_t = 10, help_heading = "Timing")]
    realtime: i32,
    /// Take arrival times from the kernel's RX timestamps (SO_TIMESTAMPNS) rather than the loop's clock.
    #[arg(long = "rx-timestamps", value_name = "BOOL", default_value_t = true, action = clap::ArgAction::Set,
          help_heading = "Timing")]
    rx_timestamps: bool,
    /// Forwarding threads: 1 serves every port from one loop; 2 serves a link with one thread per direction
    /// (not a shared segment, not half duplex or CSMA, which couple the directions): more throughput when
    /// the wire is the bottleneck, a longer round trip when the machine's idle CPUs are slow to wake (the
    /// thread of the reply sleeps; docs/wire.md).
    #[arg(long = "threads", value_name = "N", default_value_t = 1, help_heading = "Timing",
          value_parser = clap::value_parser!(u8).range(1..=2))]
    threads: u8,
    /// Experiment only (threading-model measurements, docs/wire.md): receive from one side only, so that two
    /// processes, one per direction, stand in for one thread per direction. Default: both.
    #[arg(long = "receive-from", value_name = "SIDE", default_value = "both", hide = true,
          value_parser = ["a", "b", "both"])]
    receive_from: String,
}

fn load_config(path: &PathBuf) -> Result<LinkConfig, WireError> {
    let mut text = String::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_string(&mut text)
            .map_err(|e| WireError::Config(format!("--config -: cannot read stdin: {e}")))?;
    } else {
        text = std::fs::read_to_string(path)
            .map_err(|e| WireError::Config(format!("--config {}: cannot read: {e}", path.display())))?;
    }
    serde_json::from_str(&text).map_err(|e| {
        WireError::Config(format!(
            "--config {}: not a valid link configuration: {e} (expected a JSON LinkConfig, see docs/wire.md)",
            path.display()
        ))
    })
}

fn emit(line: &Value) {
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "{line}");
    let _ = out.flush();
}

/// The ports in order: (interface, host MAC). `--if-a A --if-b B` is two ports without MACs.
fn ports_of(args: &Args) -> Result<Vec<(String, Option<Mac>)>, WireError> {
    let ports: Vec<(String, Option<Mac>)> = if let (Some(a), Some(b)) = (&args.if_a, &args.if_b) {
        if a == b {
            return Err(WireError::Config(format!(
                "--if-a and --if-b are both {a:?}; expected the two different interfaces of the link namespace"
            )));
        }
        vec![(a.clone(), None), (b.clone(), None)]
    } else {
        let mut out = Vec::new();
        for p in &args.port {
            let (ifname, mac) = match p.split_once('=') {
                None => (p.as_str(), None),
                Some((i, m)) => {
                    let mac = parse_mac(m).ok_or_else(|| {
                        WireError::Config(format!(
                            "--port {p:?}: {m:?} is not a MAC address; expected IFNAME=xx:xx:xx:xx:xx:xx"
                        ))
                    })?;
                    (i, Some(mac))
                }
            };
            if out.iter().any(|(n, _): &(String, Option<Mac>)| n == ifname) {
                return Err(WireError::Config(format!(
                    "--port {ifname:?} is given twice; expected each interface of the segment once"
                )));
            }
            out.push((ifname.to_string(), mac));
        }
        out
    };
    if !(2..=MAX_PORTS).contains(&ports.len()) {
        return Err(WireError::Config(format!(
            "{} --port given; expected 2 to {MAX_PORTS} (one per host of the segment), or --if-a and --if-b",
            ports.len()
        )));
    }
    Ok(ports)
}

fn run(args: Args) -> Result<(), WireError> {
    let ports = ports_of(&args)?;
    if args.spin_us > MAX_SPIN_US {
        return Err(WireError::Config(format!(
            "--spin-us {} too large (maximum = {MAX_SPIN_US})",
            args.spin_us
        )));
    }
    if !(0..=MAX_REALTIME_PRIORITY).contains(&args.realtime) {
        return Err(WireError::Config(format!(
            "--realtime {} out of range (0 = off, 1 to {MAX_REALTIME_PRIORITY})",
            args.realtime
        )));
    }
    if args.busy_poll_us > MAX_SPIN_US {
        return Err(WireError::Config(format!(
            "--busy-poll-us {} too large (maximum = {MAX_SPIN_US})",
            args.busy_poll_us
        )));
    }
    if args.spin_budget > 100 {
        return Err(WireError::Config(format!("--spin-budget {} too large (maximum = 100 percent)", args.spin_budget)));
    }
    clock::install_stop_handlers().map_err(|e| WireError::Io(format!("installing signal handlers: {e}")))?;
    let (cfg, origin) = match (&args.config, &args.profile) {
        (Some(path), _) => (load_config(path)?, format!("--config {}", path.display())),
        (None, Some(name)) => {
            let cfg = roughnet_wire_core::profile(name).ok_or_else(|| {
                WireError::Config(format!(
                    "--profile {name:?} is unknown; expected one of {}",
                    roughnet_wire_core::profile_names().join(", ")
                ))
            })?;
            (cfg, format!("--profile {name}"))
        }
        (None, None) => return Err(WireError::Config("one of --config FILE or --profile NAME is needed".into())),
    };
    let rejected = |e| WireError::Config(format!("{origin}: link configuration rejected: {e}"));
    let coupled = cfg.half_duplex.is_some() || cfg.csma.is_some();
    let threads = args.threads;
    match threads {
        2 if ports.len() != 2 => {
            return Err(WireError::Config(format!(
                "--threads 2: a shared segment of {} ports is served by one loop; expected --threads 1",
                ports.len()
            )))
        }
        2 if coupled => {
            return Err(WireError::Config(format!(
                "--threads 2: {origin} has half_duplex or csma, which couple the two directions (one loop); \
                 expected --threads 1"
            )))
        }
        _ => {}
    }
    if threads == 2 && args.receive_from != "both" {
        return Err(WireError::Config("--receive-from needs --threads 1 (it stands in for a thread per direction)".into()));
    }
    let core = if ports.len() == 2 {
        // Two ports are a link: the two-sided emulator (every frame to the other side; the fast path).
        core::Core::Link(Emulator::new(cfg.clone(), args.seed).map_err(rejected)?)
    } else {
        core::Core::Segment(Segment::new(cfg.clone(), args.seed, ports.iter().map(|p| p.1).collect()).map_err(rejected)?)
    };
    let receive: Vec<bool> = (0..ports.len())
        .map(|i| match args.receive_from.as_str() {
            "a" => i == 0,
            "b" => i == 1,
            _ => true,
        })
        .collect();
    let socks = ports
        .iter()
        .zip(&receive)
        .map(|((name, _), rx)| packet::PacketSocket::open(name, args.rx_timestamps, *rx).map(std::sync::Arc::new))
        .collect::<Result<Vec<_>, _>>()?;
    let control = args.control.as_deref().map(control::ControlServer::bind).transpose()?;
    let realtime = args.realtime > 0
        && match clock::set_realtime(args.realtime) {
            Ok(()) => true,
            Err(e) => {
                tracing::warn!("SCHED_FIFO priority {} not granted ({e}); ordinary scheduling", args.realtime);
                false
            }
        };
    let info = WireInfo {
        realtime,
        ports: ports
            .iter()
            .zip(&socks)
            .map(|((name, mac), s)| PortInfo {
                ifname: name.clone(),
                mtu: s.mtu,
                mac: mac.map(|m| m.iter().map(|b| format!("{b:02x}")).collect::<Vec<_>>().join(":")),
            })
            .collect(),
        seed: args.seed,
        rx_timestamps: args.rx_timestamps,
        spin_us: args.spin_us,
        control: control.as_ref().map(|c| c.path().display().to_string()),
        threads: threads.into(),
    };
    emit(&ready_line(&info));
    tracing::info!(ports = ?ports.iter().map(|p| &p.0).collect::<Vec<_>>(), "forwarding");
    clock::tighten_timer_slack();
    let opts = forward::Options {
        spin_ns: args.spin_us * 1000,
        spin_budget_ns: forward::SPIN_WINDOW_NS * args.spin_budget / 100,
        receive,
        busy_poll_ns: args.busy_poll_us * 1000,
        split: None,
    };
    let (stats, result) = if threads == 2 {
        // A second emulator of the same configuration and seed for the b_to_a thread (split.rs).
        let second = core::Core::Link(Emulator::new(cfg, args.seed).map_err(rejected)?);
        split::SplitWire::start([core, second], socks, control, info, opts)?.run()
    } else {
        let mut wire = forward::Wire::new(core, socks, control, info, opts);
        let result = wire.run();
        // Whatever ended the loop, report what was counted up to then.
        match result {
            Ok(s) => (s, Ok(())),
            Err(e) => (wire.stats(), Err(e)),
        }
    };
    emit(&stats);
    if let Some(path) = &args.stats_out {
        std::fs::write(path, format!("{stats}\n"))
            .map_err(|e| WireError::Io(format!("--stats-out {}: cannot write: {e}", path.display())))?;
    }
    result
}

/// `roughnet-wire --print-profile NAME`: the named profile's LinkConfig as one JSON line (for the Python side,
/// which merges a scenario's explicit values over it), then exit 0; an unknown name is exit 2 with the list.
/// Checked before the main parser because the link arguments are not needed for it.
fn print_profile(argv: &[String]) -> Option<i32> {
    if argv.len() != 3 || argv[1] != "--print-profile" {
        return None;
    }
    match roughnet_wire_core::profile(&argv[2]) {
        Some(cfg) => {
            emit(&serde_json::to_value(&cfg).expect("a LinkConfig serialises"));
            Some(0)
        }
        None => {
            let msg = format!(
                "--print-profile {:?}: unknown profile; expected one of {}",
                argv[2],
                roughnet_wire_core::profile_names().join(", ")
            );
            emit(&error_line("config", &msg));
            eprintln!("roughnet-wire: {msg}");
            Some(2)
        }
    }
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if let Some(code) = print_profile(&argv) {
        std::process::exit(code);
    }
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn")),
        )
        .with_writer(std::io::stderr)
        .init();
    let args = match Args::try_parse() {
        Ok(a) => a,
        Err(e) => {
            use clap::error::ErrorKind;
            if matches!(e.kind(), ErrorKind::DisplayHelp | ErrorKind::DisplayVersion) {
                let _ = e.print();
                std::process::exit(0);
            }
            let msg = e.to_string();
            emit(&error_line("config", msg.trim()));
            let _ = e.print();
            std::process::exit(2);
        }
    };
    if let Err(e) = run(args) {
        emit(&error_line(e.kind(), &e.to_string()));
        eprintln!("roughnet-wire: {e}");
        std::process::exit(e.exit_code());
    }
}
