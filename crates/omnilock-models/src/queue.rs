//! The fair mutex queue with leases, as the in-memory store keeps it: the
//! reference queue of the conformance suite.
//!
//! Follows `crates/omnilock-core/src/mem/mod.rs`: `State::try_take` (a
//! newcomer takes a free lock only when nobody waits), `Slot::hand_off`
//! (a release or an expiry grants the lock to the first waiter still
//! listening, skipping those whose acquire is gone), `Slot::expire` (the
//! lease runs out, the holder is told), `QueueEntry::drop` (a dropped
//! acquire leaves the queue, or releases the lock granted to it in the same
//! instant), and `mem/backend.rs`: `acquire` and `release` (by owner *and*
//! fencing token, so a retried or late release never frees a later
//! holder's lock).
//!
//! Faults, each at any step: the holder's lease runs out (its renewal
//! failed; a crashed holder's runs out too, in time); a client crashes (a
//! waiter's entry stays with nobody listening, a holder keeps the lock
//! until its lease runs out); a waiting acquire is dropped, also in the
//! instant after the store granted it; a release arrives late, or twice
//! (core retries a release whose answer was lost); a client that lost its
//! hold, or dropped its acquire, asks again at the back of the queue.
//!
//! Properties: **at most one holder**; **a holder is the store's holder**
//! (a client that believes it holds is the holder the store records, with
//! its token); **no waiter passed by a later one** (whenever the lock is
//! granted, no waiter still listening arrived before the one served).
//!
//! Against the real stores, the same properties are checked by the
//! conformance scenarios `mutual_exclusion`, `fifo_order`,
//! `newcomers_never_pass_a_waiter`, `cancelled_acquire_leaves_nothing`,
//! `stale_release_is_not_owner` and `abandoned_holder_expires`
//! (`crates/omnilock-testkit/src/scenarios/exclusion.rs` and `leases.rs`).

use stateright::{Model, Property};

use crate::faults::Faults;

/// The rule under test: the store's own, or a broken one that the checker
/// must catch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueRule {
    /// The in-memory store's rule.
    Store,
    /// Broken: a release checks the owner but not the fencing token, so
    /// the late copy of a retried release frees its owner's next hold.
    ReleaseByOwnerOnly,
    /// Broken (an unfair store, as SQL with `fair=false`): a release frees
    /// the lock without handing it on, waiters poll for it, and a newcomer
    /// takes a free lock whoever waits.
    Unfair,
}

/// The fair mutex queue of one lock, its clients and the faults they meet.
#[derive(Debug, Clone)]
pub struct QueueModel {
    /// How many clients contend for the lock.
    pub clients: u8,
    /// How many acquisitions each client makes (a retry after a loss or a
    /// cancel is one more).
    pub rounds: u8,
    /// The faults one run may see.
    pub faults: Faults,
    /// The rule under test.
    pub rule: QueueRule,
}

/// A state of the lock and its clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct QueueState {
    holder: Option<Holder>,
    queue: Vec<Waiter>,
    clients: Vec<Client>,
    /// Acquisitions each client has left.
    rounds: Vec<u8>,
    /// Releases sent and not applied yet: (client, token), sorted.
    releases: Vec<(u8, u8)>,
    last_token: u8,
    last_arrival: u8,
    left: Faults,
    /// Some grant passed a waiter that was still listening.
    passed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Holder {
    client: u8,
    token: u8,
    /// Which acquisition holds (a dropped acquire releases only its own).
    arrival: u8,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Waiter {
    client: u8,
    arrival: u8,
    /// False once its client crashed: nobody receives a grant sent to it.
    listening: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    Idle,
    /// Waiting for acquisition `arrival`; the store may have granted it
    /// already, and the client not yet received the grant.
    Waiting {
        arrival: u8,
    },
    Holding {
        token: u8,
    },
    /// Told that the hold with `token` was lost.
    Lost {
        token: u8,
    },
    Crashed,
}

/// One step of a client, of the store, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum QueueAction {
    /// The client asks for the lock (`try_take`, else it queues).
    Acquire(u8),
    /// A waiter receives the grant the store sent it.
    Receive(u8),
    /// A waiter polls for a free lock ([`QueueRule::Unfair`] only).
    Poll(u8),
    /// The client sends the release of its hold (or of its lost hold).
    Release(u8),
    /// The store applies release `.0` of those in flight; with `.1`, a
    /// retried copy stays in flight to be applied again.
    Apply(usize, bool),
    /// The holder's lease runs out.
    Expire,
    /// A waiting acquire is dropped.
    Cancel(u8),
    /// The client stops for good.
    Crash(u8),
}

impl QueueState {
    fn holding(&self) -> impl Iterator<Item = (u8, u8)> + '_ {
        self.clients
            .iter()
            .enumerate()
            .filter_map(|(c, s)| match s {
                Client::Holding { token } => Some((c as u8, *token)),
                _ => None,
            })
    }

    /// Grants the free lock to `client`'s acquisition `arrival`, noting
    /// whether a waiter still listening arrived earlier.
    fn grant(&mut self, client: u8, arrival: u8) -> u8 {
        self.passed |= self
            .queue
            .iter()
            .any(|w| w.listening && w.arrival < arrival && w.client != client);
        self.last_token += 1;
        self.holder = Some(Holder {
            client,
            token: self.last_token,
            arrival,
        });
        self.last_token
    }

    /// `Slot::hand_off`: the first waiter still listening gets the lock.
    fn hand_off(&mut self, rule: QueueRule) {
        if rule == QueueRule::Unfair {
            return;
        }
        while self.holder.is_none() && !self.queue.is_empty() {
            let next = self.queue.remove(0);
            if next.listening {
                self.grant(next.client, next.arrival);
            }
        }
    }

    /// The holder's lease ran out: it is told, the next waiter served.
    fn expire(&mut self, rule: QueueRule) {
        let Some(holder) = self.holder.take() else {
            return;
        };
        let client = &mut self.clients[holder.client as usize];
        let told = match *client {
            Client::Holding { token } => token == holder.token,
            Client::Waiting { arrival } => arrival == holder.arrival,
            _ => false,
        };
        if told {
            *client = Client::Lost {
                token: holder.token,
            };
        }
        self.hand_off(rule);
    }
}

impl Model for QueueModel {
    type State = QueueState;
    type Action = QueueAction;

    fn init_states(&self) -> Vec<QueueState> {
        let n = self.clients as usize;
        vec![QueueState {
            holder: None,
            queue: Vec::new(),
            clients: vec![Client::Idle; n],
            rounds: vec![self.rounds; n],
            releases: Vec::new(),
            last_token: 0,
            last_arrival: 0,
            left: self.faults,
            passed: false,
        }]
    }

    fn actions(&self, state: &QueueState, actions: &mut Vec<QueueAction>) {
        for (c, client) in state.clients.iter().enumerate() {
            let c = c as u8;
            let rounds = state.rounds[c as usize];
            match client {
                Client::Idle if rounds > 0 => actions.push(QueueAction::Acquire(c)),
                Client::Lost { .. } => {
                    actions.push(QueueAction::Release(c));
                    if rounds > 0 {
                        actions.push(QueueAction::Acquire(c));
                    }
                }
                Client::Waiting { arrival } => {
                    if state.holder.is_some_and(|h| h.arrival == *arrival) {
                        actions.push(QueueAction::Receive(c));
                    }
                    if self.rule == QueueRule::Unfair && state.holder.is_none() {
                        actions.push(QueueAction::Poll(c));
                    }
                    if state.left.cancels > 0 {
                        actions.push(QueueAction::Cancel(c));
                    }
                }
                Client::Holding { .. } => actions.push(QueueAction::Release(c)),
                _ => {}
            }
            if client != &Client::Crashed && state.left.crashes > 0 {
                actions.push(QueueAction::Crash(c));
            }
        }
        for i in 0..state.releases.len() {
            actions.push(QueueAction::Apply(i, false));
            if state.left.duplicates > 0 {
                actions.push(QueueAction::Apply(i, true));
            }
        }
        if let Some(holder) = state.holder {
            let crashed = state.clients[holder.client as usize] == Client::Crashed;
            if crashed || state.left.expiries > 0 {
                actions.push(QueueAction::Expire);
            }
        }
    }

    fn next_state(&self, last: &QueueState, action: QueueAction) -> Option<QueueState> {
        let mut s = last.clone();
        match action {
            QueueAction::Acquire(c) => {
                s.rounds[c as usize] -= 1;
                s.last_arrival += 1;
                let arrival = s.last_arrival;
                let fair = self.rule != QueueRule::Unfair;
                if s.holder.is_none() && (s.queue.is_empty() || !fair) {
                    let token = s.grant(c, arrival);
                    s.clients[c as usize] = Client::Holding { token };
                } else {
                    s.queue.push(Waiter {
                        client: c,
                        arrival,
                        listening: true,
                    });
                    s.clients[c as usize] = Client::Waiting { arrival };
                }
            }
            QueueAction::Receive(c) => {
                let token = s.holder?.token;
                s.clients[c as usize] = Client::Holding { token };
            }
            QueueAction::Poll(c) => {
                let Client::Waiting { arrival } = s.clients[c as usize] else {
                    return None;
                };
                s.queue.retain(|w| w.arrival != arrival);
                let token = s.grant(c, arrival);
                s.clients[c as usize] = Client::Holding { token };
            }
            QueueAction::Release(c) => {
                let (Client::Holding { token } | Client::Lost { token }) = s.clients[c as usize]
                else {
                    return None;
                };
                s.releases.push((c, token));
                s.releases.sort_unstable();
                s.clients[c as usize] = Client::Idle;
            }
            QueueAction::Apply(i, again) => {
                let (c, token) = s.releases[i];
                if !again || !s.left.take_duplicate() {
                    s.releases.remove(i);
                }
                let owned = s.holder.is_some_and(|h| {
                    h.client == c
                        && (h.token == token || self.rule == QueueRule::ReleaseByOwnerOnly)
                });
                if owned {
                    s.holder = None;
                    s.hand_off(self.rule);
                }
            }
            QueueAction::Expire => {
                let holder = s.holder?;
                if s.clients[holder.client as usize] != Client::Crashed && !s.left.take_expiry() {
                    return None;
                }
                s.expire(self.rule);
            }
            QueueAction::Cancel(c) => {
                let Client::Waiting { arrival } = s.clients[c as usize] else {
                    return None;
                };
                s.left.take_cancel();
                let queued = s.queue.len();
                s.queue.retain(|w| w.arrival != arrival);
                if s.queue.len() == queued && s.holder.is_some_and(|h| h.arrival == arrival) {
                    // Granted in the same instant as the drop: released.
                    s.holder = None;
                    s.hand_off(self.rule);
                }
                s.clients[c as usize] = Client::Idle;
            }
            QueueAction::Crash(c) => {
                s.left.take_crash();
                if let Client::Waiting { arrival } = s.clients[c as usize] {
                    for waiter in s.queue.iter_mut().filter(|w| w.arrival == arrival) {
                        waiter.listening = false;
                    }
                }
                s.clients[c as usize] = Client::Crashed;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &QueueState| {
                s.holding().count() <= 1
            }),
            Property::always("a holder is the store's holder", |_, s: &QueueState| {
                s.holding()
                    .all(|(c, token)| s.holder.is_some_and(|h| h.client == c && h.token == token))
            }),
            Property::always("no waiter passed by a later one", |_, s: &QueueState| {
                !s.passed
            }),
            Property::sometimes("two clients wait behind a holder", |_, s: &QueueState| {
                s.holder.is_some() && s.queue.iter().filter(|w| w.listening).count() >= 2
            }),
        ]
    }
}
