//! What the broker protocols (mqtt, kafka, nats) share: the `broker` and `topic`
//! configuration keys, knob parsing, client names, and turning the patterns'
//! absolute deadlines into the relative timeouts the client libraries take.
//!
//! It owns no connection: each driver module opens its own client.  Through a
//! broker there is no fan-out to do in the agent (one publication reaches every
//! subscriber), so broker senders report one peer and requesters see every reply
//! as coming from peer 0: the four roles of an endpoint (`Sender`, `Receiver`,
//! `Requester`, `Responder`) are the same for every broker protocol, written once
//! here for any `BrokerEndpoint`.

use serde::de::DeserializeOwned;
use std::time::Duration;

use super::{options_error, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError, Role};
use crate::signals::stop_requested;

/// Topic used when the runner passes none (agents started by hand).
pub const DEFAULT_TOPIC: &str = "roughnet/default";

/// `broker` as host and port, or a configuration error naming the protocol.
pub fn broker_addr(cfg: &Config, protocol: &str) -> Result<(String, u16), ConfigError> {
    let b = cfg.broker.as_deref().ok_or_else(|| ConfigError::Missing {
        key: "broker",
        when: format!("for protocol {protocol} (the IP:PORT of its broker service)"),
    })?;
    let bad = || {
        ConfigError::invalid(
            "broker",
            format!("{b:?}"),
            "an IP:PORT or HOST:PORT address such as \"198.18.0.1:1883\"",
        )
    };
    let (host, port) = b.rsplit_once(':').ok_or_else(bad)?;
    let port: u16 = port.parse().map_err(|_| bad())?;
    let host = host.trim_start_matches('[').trim_end_matches(']');
    if host.is_empty() || port == 0 {
        return Err(bad());
    }
    Ok((host.to_string(), port))
}

/// The run's topic (`topic`, or [`DEFAULT_TOPIC`]).
pub fn topic(cfg: &Config) -> String {
    cfg.topic
        .clone()
        .unwrap_or_else(|| DEFAULT_TOPIC.to_string())
}

/// Parse `cfg.options` into a knob struct (which denies unknown fields).
pub fn parse_options<T: DeserializeOwned>(
    cfg: &Config,
    protocol: &str,
    known: &[&str],
) -> Result<T, ConfigError> {
    serde_json::from_value(serde_json::Value::Object(cfg.options.clone()))
        .map_err(|e| options_error(protocol, known, e))
}

/// A client name unique to this process and role (brokers refuse duplicates).
pub fn client_id(protocol: &str, cfg: &Config) -> String {
    format!(
        "roughnet-{protocol}-{}-{}-{:x}",
        cfg.role.as_str(),
        std::process::id(),
        now_ns() & 0xff_ffff
    )
}

/// Time left until `deadline_ns` (zero when it has passed).
pub fn until(deadline_ns: u64) -> Duration {
    Duration::from_nanos(deadline_ns.saturating_sub(now_ns()))
}

/// For blocking sends: `Err` once a signal arrived or the run's timeout passed.
pub fn check_send(cfg: &Config, what: &str) -> Result<(), DriverError> {
    if stop_requested() {
        return Err(DriverError::Interrupted);
    }
    if now_ns() >= cfg.give_up_ns() {
        return Err(DriverError::GaveUp {
            what: what.to_string(),
            timeout_ms: cfg.timeout_ns / 1_000_000,
        });
    }
    Ok(())
}

/// True for the roles that receive first (receiver, ponger).
pub fn is_listening(cfg: &Config) -> bool {
    matches!(cfg.role, Role::Receiver | Role::Ponger)
}

/// A protocol error from the broker at `addr`.
pub fn protocol_error(addr: &str, msg: impl std::fmt::Display) -> DriverError {
    DriverError::Protocol {
        addr: addr.to_string(),
        msg: msg.to_string(),
    }
}

/// Copy `src` into `buf`, or the error the Receiver contract asks for when it does not fit.
pub fn copy_into(buf: &mut [u8], src: &[u8]) -> Result<usize, DriverError> {
    if src.len() > buf.len() {
        return Err(DriverError::TooLarge {
            size: src.len(),
            limit: buf.len(),
        });
    }
    buf[..src.len()].copy_from_slice(src);
    Ok(src.len())
}

/// One endpoint of a broker protocol (mqtt, kafka, nats): what each driver does its own way.  The
/// four roles follow from it (the impls below), the same for every broker protocol.
pub trait BrokerEndpoint {
    /// Publish a sender's message to the run's topic.
    fn publish(&mut self, msg: &[u8]) -> Result<(), DriverError>;
    /// Publish a requester's request (default: as a sender's message).
    fn request(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        self.publish(msg)
    }
    /// Answer the last request received (default: publish it on the endpoint's topic).
    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        self.publish(msg)
    }
    /// The next message received into `buf` (its length), or None at `deadline_ns`.
    fn next(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError>;
    /// Send the end marker `end`, wait for what is still in flight as the protocol allows, disconnect.
    fn close(&mut self, end: &[u8]) -> Result<(), DriverError>;
    /// The broker's address, as a receiver reports it (`local_addr`).
    fn broker(&self) -> String;
    /// A sender's figures beyond the patterns' (acknowledgements, reconnects).
    fn sender_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
    /// A receiver's figures beyond the patterns'.
    fn receiver_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        serde_json::Map::new()
    }
}

impl<T: BrokerEndpoint> Sender for T {
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        self.publish(msg)?;
        Ok(0)
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        self.close(end)
    }

    fn peers(&self) -> usize {
        1
    }

    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.sender_results()
    }
}

impl<T: BrokerEndpoint> Receiver for T {
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        self.next(buf, deadline_ns)
    }

    fn local_addr(&self) -> String {
        self.broker()
    }

    fn extra_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.receiver_results()
    }
}

impl<T: BrokerEndpoint> Requester for T {
    fn send(&mut self, msg: &[u8]) -> Result<u32, DriverError> {
        self.request(msg)?;
        Ok(0)
    }

    fn recv(
        &mut self,
        buf: &mut [u8],
        deadline_ns: u64,
    ) -> Result<Option<(usize, usize)>, DriverError> {
        Ok(self.next(buf, deadline_ns)?.map(|n| (n, 0)))
    }

    fn finish(&mut self, end: &[u8]) -> Result<(), DriverError> {
        self.close(end)
    }

    fn peers(&self) -> usize {
        1
    }
}

impl<T: BrokerEndpoint> Responder for T {
    fn recv(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        self.next(buf, deadline_ns)
    }

    fn reply(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        BrokerEndpoint::reply(self, msg)
    }

    fn local_addr(&self) -> String {
        self.broker()
    }
}

/// The `reconnect` knob's result fields: `reconnects` and `disconnected_s`, the outage still under way
/// (`down_since_ns`, 0 when connected) included.
pub fn outage_results(
    reconnects: u64,
    down_ns: u64,
    down_since_ns: u64,
) -> serde_json::Map<String, serde_json::Value> {
    let ongoing = if down_since_ns == 0 {
        0
    } else {
        now_ns().saturating_sub(down_since_ns)
    };
    let mut m = serde_json::Map::new();
    m.insert("reconnects".into(), reconnects.into());
    m.insert(
        "disconnected_s".into(),
        crate::clock::round6((down_ns + ongoing) as f64 / 1e9).into(),
    );
    m
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(broker: Option<&str>) -> Config {
        let mut v = serde_json::json!({"v":1,"role":"receiver","protocol":"mqtt","pattern":"stream",
            "listen":"127.0.0.1:0","payload_bytes":64,"messages":10});
        if let Some(b) = broker {
            v["broker"] = b.into();
        }
        Config::parse(&v.to_string()).unwrap()
    }

    #[test]
    fn broker_addresses_are_checked() {
        assert_eq!(
            broker_addr(&cfg(Some("198.18.0.1:1883")), "mqtt").unwrap(),
            ("198.18.0.1".to_string(), 1883)
        );
        assert_eq!(
            broker_addr(&cfg(Some("[::1]:4222")), "nats").unwrap().0,
            "::1"
        );
        let e = broker_addr(&cfg(None), "kafka").unwrap_err().to_string();
        assert!(e.contains("`broker` is required for protocol kafka"), "{e}");
        let e = broker_addr(&cfg(Some("nohost")), "mqtt")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`broker` = \"nohost\"") && e.contains("IP:PORT"),
            "{e}"
        );
        assert!(broker_addr(&cfg(Some("h:0")), "mqtt").is_err());
    }

    #[test]
    fn copy_refuses_what_does_not_fit() {
        let mut b = [0u8; 4];
        assert_eq!(copy_into(&mut b, b"abc").unwrap(), 3);
        assert!(matches!(
            copy_into(&mut b, b"abcde"),
            Err(DriverError::TooLarge { size: 5, limit: 4 })
        ));
    }
}
