//! Host mode: a process's shared clients by broker address (one MQTT client, one NATS connection
//! per broker), each opened by the first flow that needs it and closed when the last flow
//! holding it lets go.  The drivers keep what a client is and how it connects; this is only the
//! registry: the plan's slots, found by broker, each with its live client and its holders.

use std::sync::{Arc, Mutex, MutexGuard};

/// A lock that outlives a panicking holder (the data stays usable: counters and handles).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One shared client: its plan (`P`), once a flow opened it the client (`L`), and how many
/// flows hold it.
pub(crate) struct Slot<P, L> {
    pub plan: P,
    pub live: Option<L>,
    pub holders: usize,
}

/// A slot as the registry and the flows holding it share it.
pub(crate) type SlotRef<P, L> = Arc<Mutex<Slot<P, L>>>;

/// The slots by broker address (empty in `run` mode: every flow has its own client).  Each
/// slot has its own lock, so finding a flow's client never waits for another broker's slot
/// (locked while its client connects).
pub(crate) struct HostSlots<P, L> {
    slots: Mutex<Vec<(String, SlotRef<P, L>)>>,
}

impl<P, L> HostSlots<P, L> {
    pub const fn new() -> Self {
        HostSlots {
            slots: Mutex::new(Vec::new()),
        }
    }

    /// Host mode, before any flow starts: one slot per (broker, plan), none live yet.
    pub fn install(&self, plans: impl IntoIterator<Item = (String, P)>) {
        *lock(&self.slots) = plans
            .into_iter()
            .map(|(broker, plan)| {
                let slot = Slot {
                    plan,
                    live: None,
                    holders: 0,
                };
                (broker, Arc::new(Mutex::new(slot)))
            })
            .collect();
    }

    /// The slot of `broker`, if the plan has one.
    pub fn find(&self, broker: &str) -> Option<SlotRef<P, L>> {
        lock(&self.slots)
            .iter()
            .find(|(b, _)| b == broker)
            .map(|(_, s)| s.clone())
    }
}

/// Give one holder of `slot` back; the last one takes the live client out and hands it, with the
/// plan, to `close` (under the slot's lock, so a flow starting meanwhile waits and opens anew).
pub(crate) fn release<P, L>(slot: &Mutex<Slot<P, L>>, close: impl FnOnce(&P, L)) {
    let mut s = lock(slot);
    s.holders = s.holders.saturating_sub(1);
    if s.holders == 0 {
        if let Some(live) = s.live.take() {
            close(&s.plan, live);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_found_by_broker_and_the_last_holder_takes_the_client() {
        let reg: HostSlots<u32, &'static str> = HostSlots::new();
        reg.install([
            ("10.0.0.1:1883".to_string(), 1),
            ("10.0.0.2:1883".to_string(), 2),
        ]);
        assert!(reg.find("10.0.0.3:1883").is_none());
        let slot = reg.find("10.0.0.2:1883").unwrap();
        {
            let mut s = lock(&slot);
            assert_eq!(s.plan, 2);
            s.live = Some("client");
            s.holders = 2;
        }
        let mut closed = vec![];
        release(&slot, |plan, live| closed.push((*plan, live))); // one holder left
        assert!(closed.is_empty());
        release(&slot, |plan, live| closed.push((*plan, live)));
        assert_eq!(closed, vec![(2, "client")]);
        let s = lock(&slot);
        assert_eq!((s.holders, s.live), (0, None));
    }
}
