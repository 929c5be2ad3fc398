//! Which peers are there, as this session sees their liveliness tokens: present, left (its `-left`
//! token), or gone without leaving (a closed transport that may come back); and this endpoint's own
//! presence token, withdrawn (with a `-left` token) when it leaves.

use super::*;

/// Where a peer stands, as this session saw its tokens.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum TokenState {
    Present,
    /// It declared its `-left` token: it has left (a roughnet receiver does once it
    /// has everything up to the end marker, or at its timeout).
    Left,
    /// Its token went without a `-left` token first: our transport to it closed (zenoh
    /// closes a link when a put stays blocked longer than `wait_before_close`, and
    /// reconnects); it has not left.  Since (ns).
    Dropped(u64),
}

/// The peers' liveliness tokens as this session learns of them: `prefix/<peer>` while a
/// peer is there, and `prefix-left/<peer>`, which a roughnet peer declares just before
/// it leaves (`Presence`).  One liveliness subscriber (with history) takes both, in
/// order, so a token that goes after its `-left` token is a leave and one that goes
/// without it went with the transport.  No query crosses the link under test: on a
/// link whose round trip is longer than a query's wait (an HF modem), or that drops
/// the reply, queries find no token and a present peer looks gone.
pub(super) struct PeerTokens {
    pub(super) prefix: String,
    pub(super) left_prefix: String,
    /// Key chunks of the peers in `cfg.peers`; empty (client mode without `peers`):
    /// any one token stands for them.
    pub(super) wanted: Vec<String>,
    pub(super) state: HashMap<String, TokenState>,
    /// Some wanted token has been present (a subscriber that is not a roughnet agent
    /// declares none).
    pub(super) seen: bool,
    /// A dropped peer's token came back since the last `take_rejoined`.
    pub(super) rejoined: bool,
    /// Tokens that went with our transport to their peer (reported as `transport_drops`).
    pub(super) drops: u64,
    /// How long a dropped peer may take to come back before it counts as gone.
    pub(super) rejoin_wait: Duration,
    pub(super) sub: Subscriber<FifoChannelHandler<Sample>>,
}

impl PeerTokens {
    pub(super) fn declare(
        s: &Session,
        prefix: &str,
        peers: &[SocketAddr],
        scale: u32,
    ) -> Result<Self, DriverError> {
        // `<topic>/<what>/<peer>` and `<topic>/<what>-left/<peer>`: one subscriber for both.
        let parent = prefix.rsplit_once('/').map_or("", |(p, _)| p);
        let sub = s
            .liveliness()
            .declare_subscriber(format!("{parent}/*/*"))
            .history(true)
            .with(FifoChannel::new(FIFO_CAPACITY))
            .wait()
            .map_err(|e| DriverError::Protocol {
                addr: prefix.into(),
                msg: format!("declaring the liveliness subscriber: {e}"),
            })?;
        Ok(PeerTokens {
            prefix: prefix.into(),
            left_prefix: left_prefix(prefix),
            wanted: peers.iter().map(addr_key).collect(),
            state: HashMap::new(),
            seen: false,
            rejoined: false,
            drops: 0,
            rejoin_wait: REJOIN_WAIT * scale,
            sub,
        })
    }

    pub(super) fn apply(&mut self, sample: Sample) {
        let key = sample.key_expr().as_str();
        let (left, peer) = match key.rsplit_once('/') {
            Some((p, peer)) if p == self.prefix => (false, peer),
            Some((p, peer)) if p == self.left_prefix => (true, peer),
            _ => return,
        };
        if !self.wanted.is_empty() && !self.wanted.iter().any(|w| w == peer) {
            return;
        }
        let now = self.state.get(peer).copied();
        let next = match (sample.kind(), left, now) {
            (SampleKind::Put, true, _) => TokenState::Left,
            (SampleKind::Put, false, Some(TokenState::Left)) => TokenState::Left,
            (SampleKind::Put, false, Some(TokenState::Dropped(_))) => {
                tracing::info!("zenoh: {key} is back after its transport closed");
                self.rejoined = true;
                TokenState::Present
            }
            (SampleKind::Put, false, _) => TokenState::Present,
            (SampleKind::Delete, false, Some(TokenState::Present)) => {
                tracing::info!(
                    "zenoh: {key} went with our transport to it; waiting up to {:?} for it to come back",
                    self.rejoin_wait
                );
                self.drops += 1;
                TokenState::Dropped(now_ns())
            }
            (SampleKind::Delete, _, Some(st)) => st,
            (SampleKind::Delete, _, None) => return,
        };
        self.seen |= !left;
        self.state.insert(peer.to_string(), next);
    }

    /// Take the changes already waiting (while sending: their log lines and counts come
    /// when they happen); a closed subscriber is for `update` to report.
    pub(super) fn drain(&mut self) {
        while let Ok(Some(sample)) = self.sub.try_recv() {
            self.apply(sample);
        }
    }

    /// Wait until `deadline_ns` for a change, then take every change already waiting.
    pub(super) fn update(&mut self, deadline_ns: u64) -> Result<(), DriverError> {
        let prefix = self.prefix.clone();
        let closed = |e: zenoh::Error| DriverError::Protocol {
            addr: prefix.clone(),
            msg: format!("liveliness subscriber closed: {e}"),
        };
        match self.sub.recv_deadline(instant_of(deadline_ns)) {
            Ok(Some(sample)) => self.apply(sample),
            Ok(None) => return Ok(()),
            Err(e) => return Err(closed(e)),
        }
        while let Some(sample) = self.sub.try_recv().map_err(closed)? {
            self.apply(sample);
        }
        Ok(())
    }

    /// Peers whose token is present now.
    pub(super) fn count(&self) -> usize {
        self.state
            .values()
            .filter(|s| **s == TokenState::Present)
            .count()
    }

    pub(super) fn all_present(&self) -> bool {
        if self.wanted.is_empty() {
            self.count() >= 1
        } else {
            self.count() == self.wanted.len()
        }
    }

    /// No peer present, and none dropped recently enough to come back.
    pub(super) fn all_gone(&self, now: u64) -> bool {
        let wait = self.rejoin_wait.as_nanos() as u64;
        self.state.values().all(|s| match s {
            TokenState::Present => false,
            TokenState::Left => true,
            TokenState::Dropped(at) => now >= at.saturating_add(wait),
        })
    }

    pub(super) fn take_rejoined(&mut self) -> bool {
        std::mem::take(&mut self.rejoined)
    }

    /// Wait until the tokens are all `present` (or all gone), the stop signal, or
    /// `until_ns`; true when they are.
    pub(super) fn wait_for(&mut self, present: bool, until_ns: u64) -> Result<bool, DriverError> {
        loop {
            if (present && self.all_present()) || (!present && self.all_gone(now_ns())) {
                return Ok(true);
            }
            if stop_requested() {
                return Err(DriverError::Interrupted);
            }
            if now_ns() >= until_ns {
                if present {
                    tracing::debug!(
                        "zenoh: saw {} of {} peers under {}/ ({:?})",
                        self.count(),
                        self.wanted.len().max(1),
                        self.prefix,
                        self.state
                    );
                }
                return Ok(false);
            }
            // Wake now and then for the stop signal.
            self.update(until_ns.min(now_ns() + POLL_STOP.as_nanos() as u64))?;
        }
    }
}

/// The key a peer declares just before it leaves: `<topic>/rx/<me>` -> `<topic>/rx-left/<me>`.
pub(super) fn left_key(key: &str) -> String {
    match key.rsplit_once('/') {
        Some((what, me)) => format!("{}/{me}", left_prefix(what)),
        None => left_prefix(key),
    }
}

/// Where the `-left` tokens of the peers under `prefix` (`<topic>/rx`) are declared.
pub(super) fn left_prefix(prefix: &str) -> String {
    format!("{prefix}-left")
}

/// A receiver's or ponger's liveliness token.  Dropped, it first declares the `-left`
/// token and keeps the session `leave_linger` longer, so that senders learn it left
/// (and not that their transport to it closed: `PeerTokens`).
pub(super) struct Presence {
    pub(super) token: Option<zenoh::liveliness::LivelinessToken>,
    pub(super) session: Session,
    pub(super) left: String,
    pub(super) linger: Duration,
}

impl Drop for Presence {
    fn drop(&mut self) {
        let left = self
            .session
            .liveliness()
            .declare_token(self.left.clone())
            .wait();
        if left.is_ok() {
            std::thread::sleep(self.linger);
        }
        drop(self.token.take());
        drop(left);
    }
}
