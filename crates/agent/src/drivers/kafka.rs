//! The `kafka` driver: Apache Kafka through librdkafka (`rdkafka`, built from its
//! bundled sources), with the blocking `BaseProducer` and `BaseConsumer`.
//!
//! librdkafka runs its own threads.  The producer is rdkafka's `ThreadedProducer`,
//! whose thread serves delivery reports as they come (so the ack time is taken
//! when the broker's answer arrives, not at our next send); the consumer's
//! rebalances and messages are served by our `poll` calls.
//!
//! Topics: the run's `topic` with `/` mapped to `-` (Kafka allows `[a-zA-Z0-9._-]`);
//! ping and ramp use `<topic>-ping` and `<topic>-pong`.  The listening role
//! (receiver, ponger) creates the topics it needs with `partitions` through the
//! admin API (an existing topic is fine), so the runner does not have to.  Every
//! consuming endpoint has its own consumer group (each receiver gets every
//! message), reads from the beginning of the fresh per-run topic, and is ready only
//! once the group coordinator assigned it partitions.  The sender records the
//! produce (acknowledgement) latency from each delivery report into `ack_latency`.
//! The end marker goes to every partition, so a receiver sees it after the data.
//!
//! A broker that went away (librdkafka reports the transport failure, or an idle
//! receiver finds nothing listening) ends the run with an error, unless the
//! `reconnect` knob is on: librdkafka reconnects by itself and retries what it has
//! queued (`message.timeout.ms` is 0), so the endpoint just goes on; the outage
//! starts at the first such report and ends at the first delivery report (sender)
//! or message (receiver) after it, which counts as a reconnect (librdkafka reports
//! no reconnection).  Senders and receivers then report `reconnects` and
//! `disconnected_s`.

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::{ClientContext, DefaultClientContext};
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer as _};
use rdkafka::error::{KafkaError, RDKafkaErrorCode};
use rdkafka::message::{DeliveryResult, Message as _};
use rdkafka::producer::{BaseRecord, Producer as _, ProducerContext, ThreadedProducer};
use serde::Deserialize;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::brokered::{self, check_send, copy_into, protocol_error, until, BrokerEndpoint};
use super::{Driver, DriverError, Receiver, Requester, Responder, Sender};
use crate::clock::now_ns;
use crate::config::{Config, ConfigError};
use crate::hist::Latency;
use crate::signals::stop_requested;

const KNOBS: [&str; 9] = [
    "acks",
    "linger",
    "batch_size",
    "compression",
    "idempotence",
    "partitions",
    "fetch_min_bytes",
    "fetch_max_wait",
    "reconnect",
];
/// Largest message: 8 MiB (SEEDS S0 sends 1024 KB, past Kafka's default limit of
/// 1048588 bytes for a record batch); the broker roughnet starts allows batches of
/// `PRODUCER_MAX_BYTES` (`message.max.bytes` in python/roughnet/services/configs.py).
pub const MAX_MESSAGE: usize = 8 << 20;
/// The producer's `message.max.bytes` (the largest batch), the same as the broker's:
/// one largest message with 64 KiB for the batch and record overhead.
const PRODUCER_MAX_BYTES: &str = "8454144";
/// Pause while librdkafka's queue is full.
const QUEUE_FULL_WAIT: Duration = Duration::from_millis(1);
/// How long `finish` waits for outstanding writes with `acks` "0" (at most the run's
/// timeout); with acknowledgements it waits as long as the run allows.
const FLUSH_WAIT_NS: u64 = 30_000_000_000;
const SLICE: Duration = Duration::from_millis(50);
/// An idle receiver checks this often that its broker still listens.
const IDLE_PROBE_NS: u64 = 1_000_000_000;

fn default_acks() -> String {
    "all".into()
}
fn default_linger() -> u64 {
    5_000_000
}
fn default_batch() -> u64 {
    1_000_000
}
fn default_compression() -> String {
    "none".into()
}
fn one() -> u32 {
    1
}
fn default_fetch_wait() -> u64 {
    500_000_000
}

/// Knobs (docs/protocols.md): sizes in bytes, durations in ns.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct KafkaOptions {
    #[serde(default = "default_acks")]
    pub acks: String,
    #[serde(default = "default_linger")]
    pub linger: u64,
    #[serde(default = "default_batch")]
    pub batch_size: u64,
    #[serde(default = "default_compression")]
    pub compression: String,
    #[serde(default)]
    pub idempotence: bool,
    #[serde(default = "one")]
    pub partitions: u32,
    #[serde(default = "one_u64")]
    pub fetch_min_bytes: u64,
    #[serde(default = "default_fetch_wait")]
    pub fetch_max_wait: u64,
    /// Survive the broker going away and coming back (module docs).
    #[serde(default)]
    pub reconnect: bool,
}

fn one_u64() -> u64 {
    1
}

pub struct Kafka {
    opts: KafkaOptions,
    broker: String,
    topic: String,
}

/// Kafka's topic name for a run topic: `/` becomes `-`, other characters Kafka
/// refuses become `_`, at most 240 characters (room for `-ping`).
pub fn kafka_topic(t: &str) -> String {
    t.chars()
        .map(|c| match c {
            '/' => '-',
            c if c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-' => c,
            _ => '_',
        })
        .take(240)
        .collect()
}

impl Kafka {
    pub fn from_config(cfg: &Config) -> Result<Kafka, ConfigError> {
        let opts: KafkaOptions = brokered::parse_options(cfg, "kafka", &KNOBS)?;
        if !matches!(opts.acks.as_str(), "0" | "1" | "all") {
            return Err(ConfigError::invalid(
                "options.acks",
                format!("{:?}", opts.acks),
                "\"0\", \"1\" or \"all\"",
            ));
        }
        if opts.linger > 900_000_000_000 {
            return Err(ConfigError::invalid(
                "options.linger",
                format!("{} ns", opts.linger),
                "at most 900 s (librdkafka's linger.ms range)",
            ));
        }
        if !(1..=2_147_483_647).contains(&opts.batch_size) {
            return Err(ConfigError::invalid(
                "options.batch_size",
                opts.batch_size,
                "between 1 and 2147483647 bytes",
            ));
        }
        if !matches!(
            opts.compression.as_str(),
            "none" | "gzip" | "snappy" | "lz4" | "zstd"
        ) {
            return Err(ConfigError::invalid(
                "options.compression",
                format!("{:?}", opts.compression),
                "one of none, gzip, snappy, lz4, zstd",
            ));
        }
        if opts.idempotence && opts.acks != "all" {
            return Err(ConfigError::invalid(
                "options.idempotence",
                true,
                format!(
                    "false with acks = {:?} (an idempotent producer needs acks = \"all\")",
                    opts.acks
                ),
            ));
        }
        if opts.partitions == 0 || opts.partitions > 10_000 {
            return Err(ConfigError::invalid(
                "options.partitions",
                opts.partitions,
                "between 1 and 10000",
            ));
        }
        if !(1..=100_000_000).contains(&opts.fetch_min_bytes) {
            return Err(ConfigError::invalid(
                "options.fetch_min_bytes",
                opts.fetch_min_bytes,
                "between 1 and 100000000 bytes",
            ));
        }
        let w = opts.fetch_max_wait;
        if !w.is_multiple_of(1_000_000) || w > 300_000_000_000 {
            return Err(ConfigError::invalid(
                "options.fetch_max_wait",
                format!("{} ns", opts.fetch_max_wait),
                "whole ms from 0 to 300 s (librdkafka's fetch.wait.max.ms)",
            ));
        }
        let (host, port) = brokered::broker_addr(cfg, "kafka")?;
        let broker = if host.contains(':') {
            format!("[{host}]:{port}")
        } else {
            format!("{host}:{port}")
        };
        Ok(Kafka {
            opts,
            broker,
            topic: kafka_topic(&brokered::topic(cfg)),
        })
    }

    fn producer_config(&self, cfg: &Config) -> ClientConfig {
        let o = &self.opts;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.broker)
            .set("client.id", brokered::client_id("kafka", cfg))
            .set("acks", &o.acks)
            .set("linger.ms", format!("{}", o.linger as f64 / 1e6))
            .set("batch.size", o.batch_size.to_string())
            .set("compression.type", &o.compression)
            .set("enable.idempotence", o.idempotence.to_string())
            .set("message.max.bytes", PRODUCER_MAX_BYTES)
            // A message is never given up on by librdkafka (its default is 300 s): the run's
            // timeout bounds the flush at the end, and what is left then is `unacked`.
            .set("message.timeout.ms", "0")
            .set("log_level", "4");
        self.reconnect_backoff(&mut c);
        c
    }

    /// With `reconnect`: librdkafka's pause between connection attempts, 100 ms doubling up
    /// to 1 s (its default maximum is 10 s), as the other brokered drivers.
    fn reconnect_backoff(&self, c: &mut ClientConfig) {
        if self.opts.reconnect {
            c.set("reconnect.backoff.ms", "100")
                .set("reconnect.backoff.max.ms", "1000");
        }
    }

    fn consumer_config(&self, cfg: &Config) -> ClientConfig {
        let o = &self.opts;
        let mut c = ClientConfig::new();
        c.set("bootstrap.servers", &self.broker)
            .set("client.id", brokered::client_id("kafka", cfg))
            .set("group.id", brokered::client_id("kafka-group", cfg))
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "true")
            .set("enable.partition.eof", "false")
            .set("fetch.min.bytes", o.fetch_min_bytes.to_string())
            .set(
                "fetch.wait.max.ms",
                (o.fetch_max_wait / 1_000_000).to_string(),
            )
            .set("log_level", "4");
        self.reconnect_backoff(&mut c);
        c
    }

    fn kerr(&self, e: impl std::fmt::Display) -> DriverError {
        protocol_error(&self.broker, e)
    }

    /// Create `topics` with `partitions` (replication 1); existing ones are fine.
    fn create_topics(&self, cfg: &Config, topics: &[&str]) -> Result<(), DriverError> {
        let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
            .set("bootstrap.servers", &self.broker)
            .set("log_level", "4")
            .create()
            .map_err(|e| self.kerr(e))?;
        let new: Vec<NewTopic> = topics
            .iter()
            .map(|t| NewTopic::new(t, self.opts.partitions as i32, TopicReplication::Fixed(1)))
            .collect();
        let wait = Duration::from_nanos(
            cfg.give_up_ns()
                .saturating_sub(now_ns())
                .min(30_000_000_000),
        );
        let opts = AdminOptions::new()
            .operation_timeout(Some(wait))
            .request_timeout(Some(wait));
        let results = futures::executor::block_on(admin.create_topics(&new, &opts))
            .map_err(|e| self.kerr(e))?;
        for r in results {
            match r {
                Ok(t) => tracing::debug!(
                    "kafka: created topic {t} with {} partitions",
                    self.opts.partitions
                ),
                Err((_, RDKafkaErrorCode::TopicAlreadyExists)) => {}
                Err((t, code)) => return Err(self.kerr(format!("creating topic {t}: {code}"))),
            }
        }
        Ok(())
    }

    fn producer(&self, cfg: &Config, topic: &str) -> Result<ProducerSide, DriverError> {
        let p: ThreadedProducer<AckContext> = self
            .producer_config(cfg)
            .create_with_context(AckContext {
                down: BrokersDown::new(self.opts.reconnect),
                ..AckContext::default()
            })
            .map_err(|e| self.kerr(e))?;
        // The topic exists once its listener said ready; wait for its partitions.
        let partitions = loop {
            check_send(cfg, "Kafka topic metadata")?;
            match p.client().fetch_metadata(Some(topic), SLICE * 20) {
                Ok(md) => {
                    let n = md.topics().first().map_or(0, |t| {
                        if t.error().is_none() {
                            t.partitions().len()
                        } else {
                            0
                        }
                    });
                    if n > 0 {
                        break n as i32;
                    }
                }
                Err(e) => tracing::debug!("kafka: metadata for {topic}: {e}"),
            }
            std::thread::sleep(SLICE);
        };
        Ok(ProducerSide {
            producer: p,
            topic: topic.to_string(),
            partitions,
        })
    }

    fn consumer(&self, cfg: &Config, topic: &str) -> Result<ConsumerSide, DriverError> {
        let c: BaseConsumer<WatchContext> = self
            .consumer_config(cfg)
            .create_with_context(WatchContext {
                down: BrokersDown::new(self.opts.reconnect),
            })
            .map_err(|e| self.kerr(e))?;
        c.subscribe(&[topic]).map_err(|e| self.kerr(e))?;
        // Ready only once the group coordinator assigned us partitions.
        let mut pending = VecDeque::new();
        loop {
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= cfg.give_up_ns() {
                return Err(DriverError::GaveUp {
                    what: format!(
                        "a partition assignment for topic {topic} from {}",
                        self.broker
                    ),
                    timeout_ms: cfg.timeout_ns / 1_000_000,
                });
            }
            match c.poll(SLICE) {
                Some(Ok(m)) => pending.push_back(m.payload().unwrap_or_default().to_vec()),
                Some(Err(e)) => tracing::debug!("kafka: while joining the group: {e}"),
                None => {}
            }
            if c.assignment().map(|a| a.count() > 0).unwrap_or(false) {
                break;
            }
        }
        tracing::debug!(
            "kafka: assigned {:?}",
            c.assignment().ok().map(|a| a.count())
        );
        Ok(ConsumerSide {
            consumer: c,
            pending,
            last_probe_ns: now_ns(),
        })
    }
}

impl Driver for Kafka {
    fn name(&self) -> &'static str {
        "kafka"
    }

    fn max_message_bytes(&self) -> usize {
        MAX_MESSAGE
    }

    fn open_sender(&self, cfg: &Config) -> Result<Box<dyn Sender>, DriverError> {
        let p = self.producer(cfg, &self.topic)?;
        Ok(Box::new(KafkaEndpoint::new(self, cfg, Some(p), None)))
    }

    fn open_receiver(&self, cfg: &Config) -> Result<Box<dyn Receiver>, DriverError> {
        self.create_topics(cfg, &[&self.topic])?;
        let c = self.consumer(cfg, &self.topic)?;
        Ok(Box::new(KafkaEndpoint::new(self, cfg, None, Some(c))))
    }

    fn open_requester(&self, cfg: &Config) -> Result<Box<dyn Requester>, DriverError> {
        let (ping, pong) = (
            format!("{}-ping", self.topic),
            format!("{}-pong", self.topic),
        );
        let c = self.consumer(cfg, &pong)?;
        let p = self.producer(cfg, &ping)?;
        Ok(Box::new(KafkaEndpoint::new(self, cfg, Some(p), Some(c))))
    }

    fn open_responder(&self, cfg: &Config) -> Result<Box<dyn Responder>, DriverError> {
        let (ping, pong) = (
            format!("{}-ping", self.topic),
            format!("{}-pong", self.topic),
        );
        self.create_topics(cfg, &[&ping, &pong])?;
        let c = self.consumer(cfg, &ping)?;
        let p = self.producer(cfg, &pong)?;
        Ok(Box::new(KafkaEndpoint::new(self, cfg, Some(p), Some(c))))
    }
}

/// Delivery reports: produce latency from each message's send time (the opaque).
#[derive(Default)]
struct AckContext {
    acks: Mutex<Acks>,
    down: BrokersDown,
}

#[derive(Default)]
struct Acks {
    latency: Latency,
    failed: u64,
    last_error: Option<String>,
}

impl ClientContext for AckContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.down.note(error, reason);
    }
}

/// Set once librdkafka reports the broker gone: the run cannot go on.  With `reconnect`,
/// the outages instead (module docs).
#[derive(Default)]
struct BrokersDown {
    gone: Mutex<Option<String>>,
    reconnect: bool,
    reconnects: AtomicU64,
    /// Time without the broker in finished outages, and the start of the current one (0: none).
    down_ns: AtomicU64,
    down_since: AtomicU64,
}

impl BrokersDown {
    fn new(reconnect: bool) -> Self {
        BrokersDown {
            reconnect,
            ..BrokersDown::default()
        }
    }

    fn note(&self, error: KafkaError, reason: &str) {
        tracing::warn!("kafka: {error}: {reason}");
        if self.reconnect {
            // Any transport failure starts an outage; librdkafka reconnects by itself.
            if matches!(
                &error,
                KafkaError::Global(
                    RDKafkaErrorCode::AllBrokersDown | RDKafkaErrorCode::BrokerTransportFailure
                )
            ) {
                self.went_down();
            }
            return;
        }
        // librdkafka reports a broker that went away as a transport failure on each
        // reconnect; a refused connection means no broker listens there any more (a
        // live broker never refuses, an impaired link times out instead).
        let gone = match &error {
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown) => true,
            KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure) => {
                reason.contains("Connection refused")
            }
            _ => false,
        };
        if gone {
            *self.gone.lock().unwrap_or_else(|p| p.into_inner()) =
                Some(format!("{error}: {reason}"));
        }
    }

    /// With `reconnect`: an outage starts (if none is going on).
    fn went_down(&self) {
        if self
            .down_since
            .compare_exchange(0, now_ns().max(1), Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
        {
            tracing::warn!("kafka: the broker is gone; waiting for librdkafka to reconnect");
        }
    }

    /// Data moved (a delivery report, a message): an outage going on has ended.
    fn data_moved(&self) {
        if self.down_since.load(Ordering::Relaxed) == 0 {
            return;
        }
        let since = self.down_since.swap(0, Ordering::AcqRel);
        if since != 0 {
            let down = now_ns().saturating_sub(since);
            self.down_ns.fetch_add(down, Ordering::AcqRel);
            self.reconnects.fetch_add(1, Ordering::AcqRel);
            tracing::warn!("kafka: data moves again after {:.3} s", down as f64 / 1e9);
        }
    }

    /// Gone for good, or (with `reconnect`) gone at the moment.
    fn is_set(&self) -> bool {
        self.gone
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .is_some()
            || self.down_since.load(Ordering::Acquire) != 0
    }

    /// With `reconnect`: `reconnects` and `disconnected_s` (a current outage included).
    fn results(&self) -> serde_json::Map<String, serde_json::Value> {
        if !self.reconnect {
            return serde_json::Map::new();
        }
        brokered::outage_results(
            self.reconnects.load(Ordering::Acquire),
            self.down_ns.load(Ordering::Acquire),
            self.down_since.load(Ordering::Acquire),
        )
    }

    fn check(&self, broker: &str) -> Result<(), DriverError> {
        match &*self.gone.lock().unwrap_or_else(|p| p.into_inner()) {
            Some(m) => Err(protocol_error(
                broker,
                format!("lost the Kafka broker ({m})"),
            )),
            None => Ok(()),
        }
    }
}

/// The consumer's context: watches for the broker going away.
#[derive(Default)]
struct WatchContext {
    down: BrokersDown,
}

impl ClientContext for WatchContext {
    fn error(&self, error: KafkaError, reason: &str) {
        self.down.note(error, reason);
    }
}

impl rdkafka::consumer::ConsumerContext for WatchContext {}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, r: &DeliveryResult<'_>, sent_ns: usize) {
        let now = now_ns();
        let mut a = self.acks.lock().unwrap_or_else(|p| p.into_inner());
        match r {
            Ok(_) => {
                a.latency.record(now.saturating_sub(sent_ns as u64) as i64);
                self.down.data_moved();
            }
            Err((e, _)) => {
                a.failed += 1;
                a.last_error = Some(e.to_string());
            }
        }
    }
}

struct ProducerSide {
    producer: ThreadedProducer<AckContext>,
    topic: String,
    partitions: i32,
}

struct ConsumerSide {
    consumer: BaseConsumer<WatchContext>,
    /// Messages that arrived while waiting for the assignment.
    pending: VecDeque<Vec<u8>>,
    /// Last message or broker check (CLOCK_MONOTONIC ns).
    last_probe_ns: u64,
}

/// One Kafka client pair: every role is this (a sender has only the producer,
/// a receiver only the consumer).
pub struct KafkaEndpoint {
    producer: Option<ProducerSide>,
    consumer: Option<ConsumerSide>,
    broker: String,
    cfg: Config,
    acks_zero: bool,
    /// Set when this endpoint found the broker gone.
    lost: bool,
}

impl KafkaEndpoint {
    fn new(
        d: &Kafka,
        cfg: &Config,
        producer: Option<ProducerSide>,
        consumer: Option<ConsumerSide>,
    ) -> Self {
        KafkaEndpoint {
            producer,
            consumer,
            broker: d.broker.clone(),
            cfg: cfg.clone(),
            acks_zero: d.opts.acks == "0",
            lost: false,
        }
    }

    fn produce(&mut self, msg: &[u8], partition: Option<i32>) -> Result<(), DriverError> {
        let p = self
            .producer
            .as_ref()
            .expect("sending roles have a producer");
        p.producer.context().down.check(&self.broker)?;
        loop {
            let mut rec =
                BaseRecord::<(), [u8], usize>::with_opaque_to(&p.topic, now_ns() as usize)
                    .payload(msg);
            if let Some(i) = partition {
                rec = rec.partition(i);
            }
            match p.producer.send(rec) {
                Ok(()) => break,
                Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), _)) => {
                    check_send(
                        &self.cfg,
                        "producing to Kafka (the producer queue stayed full)",
                    )?;
                    std::thread::sleep(QUEUE_FULL_WAIT);
                }
                Err((e, _)) => return Err(protocol_error(&self.broker, e)),
            }
        }
        Ok(())
    }
}

impl Drop for KafkaEndpoint {
    fn drop(&mut self) {
        let lost = self.lost
            || self
                .producer
                .as_ref()
                .is_some_and(|p| p.producer.context().down.is_set())
            || self
                .consumer
                .as_ref()
                .is_some_and(|c| c.consumer.context().down.is_set());
        if lost {
            // Closing would wait for the vanished broker (leaving the group waits up
            // to the session timeout, 45 s): the process ends right after, so let the
            // clients go without a goodbye.
            std::mem::forget(self.producer.take());
            std::mem::forget(self.consumer.take());
        } else if let Some(p) = &self.producer {
            // After `close` the queue is empty; this only matters after an error.
            p.producer
                .purge(rdkafka::producer::PurgeConfig::default().queue().inflight());
        }
    }
}

impl BrokerEndpoint for KafkaEndpoint {
    fn publish(&mut self, msg: &[u8]) -> Result<(), DriverError> {
        self.produce(msg, None)
    }

    fn next(&mut self, buf: &mut [u8], deadline_ns: u64) -> Result<Option<usize>, DriverError> {
        let c = self
            .consumer
            .as_mut()
            .expect("receiving roles have a consumer");
        if let Some(m) = c.pending.pop_front() {
            return copy_into(buf, &m).map(Some);
        }
        let got = c.consumer.poll(until(deadline_ns));
        c.consumer.context().down.check(&self.broker)?;
        match got {
            None => {
                // Idle: is a broker still listening?  librdkafka retries a vanished
                // broker for ever and reports it late, so look for ourselves: a refused
                // TCP connection is definite (a timeout, e.g. on a lossy link, is not).
                let now = now_ns();
                if now.saturating_sub(c.last_probe_ns) >= IDLE_PROBE_NS {
                    c.last_probe_ns = now;
                    if let Ok(addr) = self.broker.parse::<std::net::SocketAddr>() {
                        if let Err(e) = std::net::TcpStream::connect_timeout(&addr, SLICE) {
                            let down = &c.consumer.context().down;
                            if e.kind() == std::io::ErrorKind::ConnectionRefused && down.reconnect {
                                down.went_down();
                            } else if e.kind() == std::io::ErrorKind::ConnectionRefused {
                                self.lost = true;
                                return Err(protocol_error(
                                    &self.broker,
                                    format!(
                                        "lost the Kafka broker (nothing listens any more: {e})"
                                    ),
                                ));
                            }
                        }
                    }
                }
                Ok(None)
            }
            Some(Ok(m)) => {
                c.last_probe_ns = now_ns();
                c.consumer.context().down.data_moved();
                copy_into(buf, m.payload().unwrap_or_default()).map(Some)
            }
            // Transient consumer errors (a rebalance, a retried fetch) are logged, not fatal.
            Some(Err(e)) => {
                tracing::warn!("kafka: consumer: {e}");
                Ok(None)
            }
        }
    }

    /// End marker to every partition, then wait for the deliveries.
    fn close(&mut self, end: &[u8]) -> Result<(), DriverError> {
        let n = self.producer.as_ref().map_or(0, |p| p.partitions);
        for i in 0..n {
            self.produce(end, Some(i))?;
        }
        let Some(p) = &self.producer else {
            return Ok(());
        };
        // Acknowledged deliveries are waited for as long as the run allows: over a lossy
        // link TCP's retransmission backoff can hold the producer's connection for tens of
        // seconds (at 25 % drop, 69 of 150 10 KB messages were still queued after a 30 s
        // flush, and leaving then dropped them).
        let start = now_ns();
        let left = self.cfg.give_up_ns().saturating_sub(start);
        let limit = start.saturating_add(if self.acks_zero {
            left.min(FLUSH_WAIT_NS)
        } else {
            left
        });
        // In slices, so that a stop request or a vanished broker ends the wait.
        loop {
            let slice = until(limit).clamp(Duration::from_millis(1), SLICE * 20);
            match p.producer.flush(slice) {
                Ok(()) => break,
                Err(KafkaError::Flush(RDKafkaErrorCode::OperationTimedOut)) => {}
                Err(e) => {
                    return Err(protocol_error(
                        &self.broker,
                        format!("flushing at the end: {e}"),
                    ))
                }
            }
            p.producer.context().down.check(&self.broker)?;
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= limit {
                return Err(protocol_error(
                    &self.broker,
                    format!(
                        "flushing at the end: {} message(s) still queued or unacknowledged after {:.1} s",
                        p.producer.in_flight_count(),
                        (now_ns() - start) as f64 / 1e9
                    ),
                ));
            }
        }
        let a = p
            .producer
            .context()
            .acks
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        if a.failed > 0 {
            tracing::warn!(
                "kafka: {} deliveries failed, the last: {:?}",
                a.failed,
                a.last_error
            );
        }
        Ok(())
    }

    fn broker(&self) -> String {
        self.broker.clone()
    }

    fn sender_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        let mut m = serde_json::Map::new();
        if let Some(p) = &self.producer {
            let a = p
                .producer
                .context()
                .acks
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            // acks = 0: the report comes when the request is written, not acknowledged.
            m.insert("ack_latency".into(), a.latency.to_json());
            m.insert("delivery_errors".into(), a.failed.into());
            // Called after `finish`: non-zero only when the flush at the end gave up, the
            // messages (end markers included) still queued or awaiting their acknowledgement.
            m.insert("unacked".into(), p.producer.in_flight_count().max(0).into());
            m.insert(
                "acks".into(),
                (if self.acks_zero { "0" } else { "broker" }).into(),
            );
            m.extend(p.producer.context().down.results());
        }
        m
    }

    fn receiver_results(&mut self) -> serde_json::Map<String, serde_json::Value> {
        self.consumer
            .as_ref()
            .map(|c| c.consumer.context().down.results())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(options: serde_json::Value) -> Config {
        let v = serde_json::json!({"v":1,"role":"sender","protocol":"kafka","pattern":"stream",
            "broker":"127.0.0.1:9092","topic":"roughnet/0123abc","payload_bytes":64,"messages":10,
            "options":options});
        Config::parse(&v.to_string()).unwrap()
    }

    fn err(options: serde_json::Value) -> String {
        match Kafka::from_config(&cfg(options)) {
            Ok(_) => panic!("accepted a bad configuration"),
            Err(e) => e.to_string(),
        }
    }

    #[test]
    fn knobs_are_checked_and_topics_mapped() {
        let d = Kafka::from_config(&cfg(
            serde_json::json!({"acks":"1","linger":0,"compression":"lz4"}),
        ))
        .unwrap();
        assert_eq!(d.topic, "roughnet-0123abc");
        let pc = d.producer_config(&cfg(serde_json::json!({})));
        assert_eq!(pc.get("linger.ms"), Some("0"));
        assert_eq!(pc.get("acks"), Some("1"));
        let default = Kafka::from_config(&cfg(serde_json::json!({}))).unwrap();
        let pc = default.producer_config(&cfg(serde_json::json!({})));
        assert_eq!(pc.get("linger.ms"), Some("5"));
        assert_eq!(pc.get("acks"), Some("all"));
        assert!(err(serde_json::json!({"acks":"2"})).contains("\"0\", \"1\" or \"all\""));
        assert!(err(serde_json::json!({"acks":"1","idempotence":true}))
            .contains("needs acks = \"all\""));
        assert!(err(serde_json::json!({"compression":"brotli"})).contains("zstd"));
        assert!(err(serde_json::json!({"partitions":0})).contains("options.partitions"));
        assert!(err(serde_json::json!({"fetch_max_wait":10})).contains("whole ms"));
        let e = err(serde_json::json!({"qos":1}));
        assert!(
            e.contains("protocol kafka") && e.contains("fetch_max_wait"),
            "{e}"
        );
        assert_eq!(kafka_topic("a/b c:d"), "a-b_c_d");
        assert!(!default.opts.reconnect);
        assert_eq!(pc.get("reconnect.backoff.max.ms"), None);
        let d = Kafka::from_config(&cfg(serde_json::json!({"reconnect":true}))).unwrap();
        assert!(d.opts.reconnect);
        let c = d.consumer_config(&cfg(serde_json::json!({})));
        assert_eq!(c.get("reconnect.backoff.max.ms"), Some("1000"));
    }

    #[test]
    fn a_vanished_broker_is_fatal_only_without_reconnect() {
        let refused = || {
            (
                KafkaError::Global(RDKafkaErrorCode::BrokerTransportFailure),
                "127.0.0.1:9092/1: Connect to ipv4#127.0.0.1:9092 failed: Connection refused",
            )
        };
        let off = BrokersDown::new(false);
        let (e, r) = refused();
        off.note(e, r);
        assert!(off.check("b").is_err() && off.results().is_empty());
        let on = BrokersDown::new(true);
        on.data_moved(); // data before any outage is no reconnect
        let (e, r) = refused();
        on.note(e, r);
        assert!(on.check("b").is_ok() && on.is_set());
        std::thread::sleep(Duration::from_millis(20));
        on.note(
            KafkaError::Global(RDKafkaErrorCode::AllBrokersDown),
            "1/1 brokers are down",
        );
        on.data_moved();
        assert!(!on.is_set());
        let r = on.results();
        assert_eq!(r["reconnects"], 1);
        assert!(r["disconnected_s"].as_f64().unwrap() >= 0.02, "{r:?}");
    }
}
