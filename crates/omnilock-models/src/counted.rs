//! Semaphores and read-write locks: one queue of weighted entries per
//! name, the grant rule every store follows.
//!
//! Follows `crates/omnilock-core/src/mem/counted.rs`: `CountedLocks::join`
//! (the count recorded while the queue has entries; a caller with another
//! count is refused), `Queue::admit` (walking from the front, an entry is
//! admitted while the weights so far, its own included, fit the capacity;
//! the first that does not fit stops the walk; an entry whose acquire is
//! gone leaves instead), `Queue::expire`, and `CountedLocks::leave` (a
//! release by token, a dropped waiter by id, admitted or not). A permit and
//! a reader weigh 1, a writer the whole capacity. etcd walks its keys with
//! the same rule (`fits` in `crates/omnilock-etcd/src/store/counted.rs`),
//! and so do Redis's script and SQL's transaction.
//!
//! Faults, each at any step: an admitted entry's lease runs out; a client
//! crashes (a waiting entry stays with nobody listening and leaves when
//! the walk reaches it; an admitted one keeps its place until its lease
//! runs out); a waiting acquire is dropped, also in the instant after its
//! admission; a release arrives late or twice. A caller whose count
//! differs from the recorded one is refused.
//!
//! Properties: **never more than N permits** (the admitted weights fit the
//! capacity, and no holder holds beside more holders than the count it
//! asked for), **never a reader beside a writer**, and **no waiter passed
//! by a later one**, which for a read-write lock is **no writer starved**:
//! no reader arriving after a waiting writer is admitted before it.
//!
//! Against the real stores: the conformance scenarios
//! `semaphore_permits_never_exceeded`,
//! `semaphore_two_counts_at_once_never_overlap`, `semaphore_fifo_order`,
//! `semaphore_cancelled_acquire_leaves_nothing`,
//! `semaphore_abandoned_permit_expires`, `rw_readers_never_overlap_a_writer`,
//! `rw_waiting_writer_blocks_later_readers` and
//! `rw_cancelled_writer_leaves_nothing`
//! (`crates/omnilock-testkit/src/scenarios/semaphore.rs` and `rw.rs`).

use stateright::{Model, Property};

use crate::faults::Faults;

/// The capacity of a read-write lock in the model: more than any number of
/// readers it has (core's `RW_CAPACITY` is as good as unbounded).
pub const RW_CAPACITY: u8 = 100;

/// What a client takes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Side {
    /// One permit of a semaphore of this many permits.
    Permit(u8),
    /// The shared side of a read-write lock.
    Read,
    /// The exclusive side of a read-write lock.
    Write,
}

impl Side {
    /// The weight and the capacity, as core's `Primitive::share` gives.
    fn share(self) -> (u8, u8) {
        match self {
            Side::Permit(permits) => (1, permits),
            Side::Read => (1, RW_CAPACITY),
            Side::Write => (RW_CAPACITY, RW_CAPACITY),
        }
    }
}

/// The rule under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CountedRule {
    /// The stores' rule.
    Store,
    /// Broken: every entry weighs 1, a writer too.
    IgnoreWeights,
    /// Broken: the walk goes on past an entry that does not fit, so a
    /// later reader overtakes a waiting writer.
    SkipWhatDoesNotFit,
    /// Broken: a caller whose count differs from the recorded one joins
    /// all the same.
    IgnoreRecordedCount,
}

/// Clients of one semaphore or one read-write lock.
#[derive(Debug, Clone)]
pub struct CountedModel {
    /// What each client takes, one entry per client.
    pub sides: Vec<Side>,
    /// How many acquisitions each client makes.
    pub rounds: u8,
    /// The faults one run may see.
    pub faults: Faults,
    /// The rule under test.
    pub rule: CountedRule,
}

/// A state of the queue and its clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CountedState {
    /// The recorded capacity; 0 while the queue is empty (forgotten).
    capacity: u8,
    entries: Vec<Entry>,
    clients: Vec<Client>,
    rounds: Vec<u8>,
    /// Releases sent and not applied yet: (client, token), sorted.
    releases: Vec<(u8, u8)>,
    last_token: u8,
    last_id: u8,
    left: Faults,
    passed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
struct Entry {
    id: u8,
    client: u8,
    /// The fencing token once admitted; 0 while waiting.
    token: u8,
    listening: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    Idle,
    Waiting { id: u8 },
    Holding { token: u8 },
    Lost { token: u8 },
    Crashed,
}

/// One step of a client, of the store, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CountedAction {
    /// The client joins the queue (admitted at once if it fits).
    Join(u8),
    /// A waiter receives its admission.
    Receive(u8),
    /// The client sends the release of its hold (or of its lost hold).
    Release(u8),
    /// The store applies release `.0`; with `.1`, a retried copy stays.
    Apply(usize, bool),
    /// The lease of the admitted entry at position `.0` runs out.
    Expire(usize),
    /// A waiting acquire is dropped.
    Cancel(u8),
    /// The client stops for good.
    Crash(u8),
}

impl CountedModel {
    fn weight(&self, client: u8) -> u8 {
        match self.rule {
            CountedRule::IgnoreWeights => 1,
            _ => self.sides[client as usize].share().0,
        }
    }

    /// `Queue::admit`: admits from the front while entries fit.
    fn admit(&self, s: &mut CountedState) {
        let mut used = 0u8;
        let mut at = 0;
        while at < s.entries.len() {
            let entry = s.entries[at];
            let weight = self.weight(entry.client);
            if used.saturating_add(weight) > s.capacity {
                if self.rule == CountedRule::SkipWhatDoesNotFit {
                    at += 1;
                    continue;
                }
                return;
            }
            if entry.token == 0 {
                if !entry.listening {
                    s.entries.remove(at);
                    continue;
                }
                s.passed |= s.entries[..at].iter().any(|e| e.token == 0 && e.listening);
                s.last_token += 1;
                s.entries[at].token = s.last_token;
            }
            used += weight;
            at += 1;
        }
    }

    /// Removes the entry at `at` and admits those it held back.
    fn remove(&self, s: &mut CountedState, at: usize) {
        s.entries.remove(at);
        self.admit(s);
        if s.entries.is_empty() {
            s.capacity = 0;
        }
    }
}

impl CountedState {
    /// The admitted entries' clients.
    fn admitted(&self) -> impl Iterator<Item = u8> + '_ {
        self.entries
            .iter()
            .filter(|e| e.token != 0)
            .map(|e| e.client)
    }
}

impl Model for CountedModel {
    type State = CountedState;
    type Action = CountedAction;

    fn init_states(&self) -> Vec<CountedState> {
        let n = self.sides.len();
        vec![CountedState {
            capacity: 0,
            entries: Vec::new(),
            clients: vec![Client::Idle; n],
            rounds: vec![self.rounds; n],
            releases: Vec::new(),
            last_token: 0,
            last_id: 0,
            left: self.faults,
            passed: false,
        }]
    }

    fn actions(&self, state: &CountedState, actions: &mut Vec<CountedAction>) {
        for (c, client) in state.clients.iter().enumerate() {
            let c = c as u8;
            match client {
                Client::Idle if state.rounds[c as usize] > 0 => {
                    actions.push(CountedAction::Join(c))
                }
                Client::Waiting { id } => {
                    if state.entries.iter().any(|e| e.id == *id && e.token != 0) {
                        actions.push(CountedAction::Receive(c));
                    }
                    if state.left.cancels > 0 {
                        actions.push(CountedAction::Cancel(c));
                    }
                }
                Client::Holding { .. } | Client::Lost { .. } => {
                    actions.push(CountedAction::Release(c));
                }
                _ => {}
            }
            if client != &Client::Crashed && state.left.crashes > 0 {
                actions.push(CountedAction::Crash(c));
            }
        }
        for i in 0..state.releases.len() {
            actions.push(CountedAction::Apply(i, false));
            if state.left.duplicates > 0 {
                actions.push(CountedAction::Apply(i, true));
            }
        }
        for (i, entry) in state.entries.iter().enumerate() {
            let crashed = state.clients[entry.client as usize] == Client::Crashed;
            if entry.token != 0 && (crashed || state.left.expiries > 0) {
                actions.push(CountedAction::Expire(i));
            }
        }
    }

    fn next_state(&self, last: &CountedState, action: CountedAction) -> Option<CountedState> {
        let mut s = last.clone();
        match action {
            CountedAction::Join(c) => {
                s.rounds[c as usize] -= 1;
                let capacity = self.sides[c as usize].share().1;
                let agreed = s.capacity == 0 || s.capacity == capacity;
                if !agreed && self.rule != CountedRule::IgnoreRecordedCount {
                    // `Conflict`: nothing changes, the caller gets an error.
                    return Some(s);
                }
                if s.capacity == 0 {
                    s.capacity = capacity;
                }
                s.last_id += 1;
                let id = s.last_id;
                s.entries.push(Entry {
                    id,
                    client: c,
                    token: 0,
                    listening: true,
                });
                self.admit(&mut s);
                let entry = s.entries.iter().find(|e| e.id == id)?;
                s.clients[c as usize] = match entry.token {
                    0 => Client::Waiting { id },
                    token => Client::Holding { token },
                };
            }
            CountedAction::Receive(c) => {
                let Client::Waiting { id } = s.clients[c as usize] else {
                    return None;
                };
                let token = s.entries.iter().find(|e| e.id == id)?.token;
                s.clients[c as usize] = Client::Holding { token };
            }
            CountedAction::Release(c) => {
                let (Client::Holding { token } | Client::Lost { token }) = s.clients[c as usize]
                else {
                    return None;
                };
                s.releases.push((c, token));
                s.releases.sort_unstable();
                s.clients[c as usize] = Client::Idle;
            }
            CountedAction::Apply(i, again) => {
                let (c, token) = s.releases[i];
                if !again || !s.left.take_duplicate() {
                    s.releases.remove(i);
                }
                let at = s
                    .entries
                    .iter()
                    .position(|e| e.client == c && e.token == token);
                if let Some(at) = at.filter(|_| token != 0) {
                    self.remove(&mut s, at);
                }
            }
            CountedAction::Expire(i) => {
                let entry = s.entries[i];
                let client = &mut s.clients[entry.client as usize];
                match *client {
                    Client::Crashed => {}
                    _ if !s.left.take_expiry() => return None,
                    Client::Holding { token } if token == entry.token => {
                        *client = Client::Lost { token };
                    }
                    Client::Waiting { id } if id == entry.id => {
                        *client = Client::Lost { token: entry.token };
                    }
                    _ => {}
                }
                self.remove(&mut s, i);
            }
            CountedAction::Cancel(c) => {
                let Client::Waiting { id } = s.clients[c as usize] else {
                    return None;
                };
                s.left.take_cancel();
                s.clients[c as usize] = Client::Idle;
                let at = s.entries.iter().position(|e| e.id == id)?;
                self.remove(&mut s, at);
            }
            CountedAction::Crash(c) => {
                s.left.take_crash();
                if let Client::Waiting { id } = s.clients[c as usize] {
                    for entry in s.entries.iter_mut().filter(|e| e.id == id) {
                        entry.listening = false;
                    }
                }
                s.clients[c as usize] = Client::Crashed;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always(
                "never more than N permits",
                |m: &CountedModel, s: &CountedState| {
                    let share = |c: u8| m.sides[c as usize].share();
                    let weights: u32 = s.admitted().map(|c| u32::from(share(c).0)).sum();
                    let holders = s.admitted().count();
                    weights <= u32::from(s.capacity)
                        && s.admitted().all(|c| holders <= usize::from(share(c).1))
                },
            ),
            Property::always(
                "never a reader beside a writer",
                |m: &CountedModel, s: &CountedState| {
                    let writers = s.admitted().filter(|c| m.sides[*c as usize] == Side::Write);
                    writers.count() == 0 || s.admitted().count() == 1
                },
            ),
            Property::always("no waiter passed by a later one", |_, s: &CountedState| {
                !s.passed
            }),
            Property::always("a holder is admitted", |_, s: &CountedState| {
                s.clients
                    .iter()
                    .enumerate()
                    .all(|(c, client)| match client {
                        Client::Holding { token } => s
                            .entries
                            .iter()
                            .any(|e| e.client == c as u8 && e.token == *token),
                        _ => true,
                    })
            }),
            Property::sometimes("two hold while one waits", |_, s: &CountedState| {
                s.admitted().count() >= 2 && s.entries.iter().any(|e| e.token == 0)
            }),
        ]
    }
}
