//! The zenoh driver's options: the knobs it accepts (docs/protocols.md), their checks, the
//! QUIC TLS files and the session timing (zenoh's open timeout and lease, and the driver's own
//! waits scaled with them).  The session and the roles are in `zenoh.rs`.

use std::time::Duration;

use serde::Deserialize;

use crate::config::{Config, ConfigError};

pub(super) const KNOBS: [&str; 13] = [
    "mode",
    "transport",
    "reliability",
    "congestion_control",
    "express",
    "priority",
    "multicast_scouting",
    "open_timeout",
    "lease",
    "wait_before_close",
    "tls_ca",
    "tls_cert",
    "tls_key",
];

#[derive(Debug, Default, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ZenohOptions {
    pub mode: Option<String>,
    pub transport: Option<String>,
    pub reliability: Option<String>,
    pub congestion_control: Option<String>,
    pub express: Option<bool>,
    pub priority: Option<u8>,
    pub multicast_scouting: Option<bool>,
    /// ns: zenoh's `transport/unicast/open_timeout` and `accept_timeout` (link open plus the
    /// InitSyn/InitAck/OpenSyn/OpenAck handshake); zenoh's default 10 s when absent.
    pub open_timeout: Option<u64>,
    /// ns: zenoh's `transport/link/tx/lease` (keep-alives every lease / 4); default 10 s.
    pub lease: Option<u64>,
    /// ns: how long a blocking publisher's message may wait for room in the transmit queue before zenoh
    /// closes the transport (`transport/link/tx/queue/congestion_control/block/wait_before_close`, which
    /// zenoh takes in microseconds); zenoh's default 5 s when absent.
    pub wait_before_close: Option<u64>,
    /// QUIC: PEM file of the CA that signed the listeners' certificates (every agent).
    pub tls_ca: Option<String>,
    /// QUIC: PEM certificate and private key of a listening agent (receiver, ponger, syncer).
    pub tls_cert: Option<String>,
    pub tls_key: Option<String>,
}

/// TLS files of a QUIC session (zenoh's `transport/link/tls/*`).
#[derive(Debug, Clone, Default)]
pub(super) struct Tls {
    pub(super) ca: String,
    /// (certificate, private key) of a listening session.
    pub(super) listen: Option<(String, String)>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Mode {
    Peer,
    Client,
}

/// zenoh's own defaults (DEFAULT_CONFIG.json5 of zenoh 1.10): open/accept timeout and lease.
pub(super) const ZENOH_OPEN_TIMEOUT: Duration = Duration::from_secs(10);
const ZENOH_LEASE: Duration = Duration::from_secs(10);
/// Bounds of `open_timeout` and `lease` (zenoh takes milliseconds; an hour is far past any link here).
const TIMING_MIN: Duration = Duration::from_millis(100);
const TIMING_MAX: Duration = Duration::from_secs(3600);

/// The session timeouts, and the driver's own waits scaled with them: a link whose handshake
/// needs a minute also needs longer liveliness queries and a longer wait for peers to leave.
#[derive(Debug, Clone, Copy)]
pub(super) struct Timing {
    pub(super) open: Option<Duration>,
    pub(super) lease: Option<Duration>,
}

impl Timing {
    /// How much slower than zenoh's defaults this run's link is (1 on ordinary links).
    pub(super) fn scale(&self) -> u32 {
        let open =
            self.open.unwrap_or(ZENOH_OPEN_TIMEOUT).as_millis() / ZENOH_OPEN_TIMEOUT.as_millis();
        let lease = self.lease.unwrap_or(ZENOH_LEASE).as_millis() / ZENOH_LEASE.as_millis();
        open.max(lease).max(1) as u32
    }
}

pub(super) fn pick(
    knob: &str,
    value: &Option<String>,
    allowed: &[&'static str],
) -> Result<&'static str, ConfigError> {
    match value {
        None => Ok(allowed[0]),
        Some(v) => allowed.iter().copied().find(|a| a == v).ok_or_else(|| {
            ConfigError::invalid(
                format!("options.{knob}"),
                format!("{v:?}"),
                format!("one of {} for protocol zenoh", allowed.join(", ")),
            )
        }),
    }
}

/// A duration option (ns) within [TIMING_MIN, TIMING_MAX].
pub(super) fn duration_knob(knob: &str, ns: Option<u64>) -> Result<Option<Duration>, ConfigError> {
    let Some(ns) = ns else { return Ok(None) };
    let d = Duration::from_nanos(ns);
    if d < TIMING_MIN || d > TIMING_MAX {
        return Err(ConfigError::invalid(
            format!("options.{knob}"),
            ns,
            format!(
                "{} ns to {} ns for protocol zenoh (100 ms to 1 h)",
                TIMING_MIN.as_nanos(),
                TIMING_MAX.as_nanos()
            ),
        ));
    }
    Ok(Some(d))
}

/// The TLS files of a QUIC session: `tls_ca` for every agent, `tls_cert` and `tls_key`
/// for one that listens; refused with another transport and in client mode (the
/// `zenoh-router` service listens on tcp only).
pub(super) fn tls_of(
    o: &ZenohOptions,
    transport: &str,
    mode: Mode,
    cfg: &Config,
) -> Result<Option<Tls>, ConfigError> {
    let given = [
        ("tls_ca", &o.tls_ca),
        ("tls_cert", &o.tls_cert),
        ("tls_key", &o.tls_key),
    ];
    if transport != "quic" {
        if let Some((k, v)) = given.iter().find(|(_, v)| v.is_some()) {
            return Err(ConfigError::invalid(
                format!("options.{k}"),
                format!("{:?}", v.as_deref().unwrap_or_default()),
                "no TLS files for protocol zenoh unless transport = \"quic\"",
            ));
        }
        return Ok(None);
    }
    if mode == Mode::Client {
        return Err(ConfigError::invalid(
            "options.transport",
            "\"quic\"",
            "tcp for protocol zenoh in mode client (the zenoh-router service listens on tcp only)",
        ));
    }
    let file = |key: &'static str, v: &Option<String>| -> Result<String, ConfigError> {
        let listening = if key == "options.tls_ca" {
            ""
        } else {
            " by an agent that listens"
        };
        let path = v.clone().ok_or_else(|| ConfigError::Missing {
            key,
            when: format!("for protocol zenoh over quic{listening} (a PEM file; the runner makes one per run)"),
        })?;
        if !std::path::Path::new(&path).is_file() {
            return Err(ConfigError::invalid(
                key,
                format!("{path:?}"),
                "the path of a readable PEM file",
            ));
        }
        Ok(path)
    };
    let ca = file("options.tls_ca", &o.tls_ca)?;
    let listen = if cfg.listen.is_some() {
        Some((
            file("options.tls_cert", &o.tls_cert)?,
            file("options.tls_key", &o.tls_key)?,
        ))
    } else {
        None
    };
    Ok(Some(Tls { ca, listen }))
}

#[cfg(test)]
mod tests {
    use super::super::Zenoh;
    use super::*;

    fn zenoh_of(options: serde_json::Value) -> Result<Zenoh, ConfigError> {
        let cfg = Config::parse(
            &serde_json::json!({"v": 1, "role": "receiver", "protocol": "zenoh", "pattern": "stream",
                "listen": "127.0.0.1:0", "payload_bytes": 64, "messages": 1, "options": options})
            .to_string(),
        )?;
        Zenoh::from_config(&cfg)
    }

    #[test]
    fn timing_keeps_zenohs_defaults_unless_set_and_scales_the_waits() {
        let z = zenoh_of(serde_json::json!({})).unwrap();
        assert!(z.timing.open.is_none() && z.timing.lease.is_none());
        assert_eq!(z.timing.scale(), 1);
        let z = zenoh_of(
            serde_json::json!({"open_timeout": 55_000_000_000u64, "lease": 20_000_000_000u64}),
        )
        .unwrap();
        assert_eq!(z.timing.open, Some(Duration::from_secs(55)));
        assert_eq!(z.timing.scale(), 5);
        // shorter than zenoh's defaults: the driver's own waits are not shortened
        let z = zenoh_of(serde_json::json!({"open_timeout": 1_000_000_000u64})).unwrap();
        assert_eq!(z.timing.scale(), 1);
    }

    #[test]
    fn timing_out_of_bounds_is_refused_naming_the_knob() {
        for (knob, ns) in [
            ("open_timeout", 1_000_000u64),
            ("lease", 7_200_000_000_000u64),
            ("wait_before_close", 50_000_000u64),
        ] {
            let e = zenoh_of(serde_json::json!({ knob: ns }))
                .err()
                .unwrap()
                .to_string();
            assert!(
                e.contains(&format!("options.{knob}")) && e.contains("100 ms to 1 h"),
                "{e}"
            );
        }
    }

    #[test]
    fn wait_before_close_is_zenohs_unless_set() {
        assert_eq!(zenoh_of(serde_json::json!({})).unwrap().wait_before_close, None);
        let z = zenoh_of(serde_json::json!({"wait_before_close": 30_000_000_000u64})).unwrap();
        assert_eq!(z.wait_before_close, Some(Duration::from_secs(30)));
    }

    #[test]
    fn quic_is_refused_in_client_mode() {
        let cfg = Config::parse(
            &serde_json::json!({"v": 1, "role": "sender", "protocol": "zenoh", "pattern": "stream",
                "broker": "127.0.0.1:7447", "payload_bytes": 64, "messages": 1,
                "options": {"mode": "client", "transport": "quic", "tls_ca": "/etc/hostname"}})
            .to_string(),
        )
        .unwrap();
        let e = Zenoh::from_config(&cfg).err().unwrap().to_string();
        assert!(e.contains("mode client") && e.contains("tcp only"), "{e}");
    }
}
