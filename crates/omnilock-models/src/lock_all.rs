//! `lock_all`: several locks taken one after another in one global order.
//!
//! Follows `crates/omnilock-core/src/multi.rs`: `sorted_names` (the names
//! sorted, whatever order the caller gave), `MultiLockRequest::take` (the
//! store's atomic step first where it has one, `at_once`; then each part in
//! turn, waiting for it in its own fair queue while holding the parts
//! before it), and `MultiGuard::release`. Each lock is the in-memory
//! store's fair queue (`crates/omnilock-core/src/mem/mod.rs`: `try_take`,
//! `hand_off`), and the atomic step is its `try_acquire_all`
//! (`mem/backend.rs`: every part free and nobody waiting, then all taken).
//!
//! Property: **no deadlock**: in every reachable state, either every
//! client has taken and released its set, or some client can move. The
//! initial states are every pair of overlapping sets (each in every order
//! a caller could give), or every triple of two-name sets.
//!
//! No lease runs out and no acquire is dropped here: both only ever free a
//! lock, and a deadlock must not depend on them (a holder waiting for its
//! next part keeps renewing the parts it has, for as long as it waits).
//!
//! Against the real stores: the conformance scenarios
//! `lock_all_in_opposite_orders_never_deadlocks` and
//! `lock_all_is_all_or_nothing`
//! (`crates/omnilock-testkit/src/scenarios/multi.rs`).

use stateright::{Model, Property};

/// How many locks there are: `a`, `b`, `c` (0, 1 and 2 in a state).
pub const LOCKS: u8 = 3;

/// The rule under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockAllRule {
    /// The parts in name order, as `lock_all` takes them.
    Sorted,
    /// Broken: the parts in the order the caller gave.
    CallerOrder,
}

/// Clients each taking one set of locks, every combination of sets.
#[derive(Debug, Clone)]
pub struct LockAllModel {
    /// How many clients (2 or 3).
    pub clients: u8,
    /// Whether the store has the atomic step (`atomic_lock_all`).
    pub atomic: bool,
    /// The rule under test.
    pub rule: LockAllRule,
}

/// A state of the locks and the clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct LockAllState {
    /// Each lock's holder.
    holders: [Option<u8>; LOCKS as usize],
    /// Each lock's waiting clients, first come first.
    queues: [Vec<u8>; LOCKS as usize],
    clients: Vec<Client>,
}

#[derive(Clone, PartialEq, Eq, Hash)]
struct Client {
    /// The parts in the order they are taken.
    parts: Vec<u8>,
    /// How many parts are held.
    held: u8,
    phase: Phase,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Phase {
    Start,
    /// Asking for its next part.
    Taking,
    /// In its next part's queue.
    Waiting,
    Holding,
    Done,
}

/// Shown as its parts by name, in the order it takes them (`cba`: `c`,
/// then `b`, then `a`).
impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let parts: String = self.parts.iter().map(|p| char::from(b'a' + p)).collect();
        write!(f, "{parts}: {} held, {:?}", self.held, self.phase)
    }
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum LockAllAction {
    /// The client calls `lock_all(..).acquire()` (the atomic step, if any).
    Start(u8),
    /// The client asks for its next part.
    Take(u8),
    /// The client releases every part.
    Release(u8),
}

/// Every list of distinct lock names, in every order, of `min` to `max`
/// names.
fn name_lists(min: usize, max: usize) -> Vec<Vec<u8>> {
    let mut lists: Vec<Vec<u8>> = vec![Vec::new()];
    let mut all = Vec::new();
    for len in 1..=max {
        lists = lists
            .iter()
            .flat_map(|l| {
                (0..LOCKS).filter(|n| !l.contains(n)).map(move |n| {
                    let mut longer = l.clone();
                    longer.push(n);
                    longer
                })
            })
            .collect();
        if len >= min {
            all.extend(lists.iter().cloned());
        }
    }
    all
}

impl LockAllState {
    /// The lock `lock` is free: the first waiter gets it and goes on.
    fn hand_off(&mut self, lock: u8) {
        self.holders[lock as usize] = None;
        if self.queues[lock as usize].is_empty() {
            return;
        }
        let next = self.queues[lock as usize].remove(0);
        self.holders[lock as usize] = Some(next);
        let client = &mut self.clients[next as usize];
        client.held += 1;
        client.phase = if usize::from(client.held) == client.parts.len() {
            Phase::Holding
        } else {
            Phase::Taking
        };
    }

    fn free(&self, lock: u8) -> bool {
        self.holders[lock as usize].is_none() && self.queues[lock as usize].is_empty()
    }
}

impl Model for LockAllModel {
    type State = LockAllState;
    type Action = LockAllAction;

    fn init_states(&self) -> Vec<LockAllState> {
        let lists = match self.clients {
            2 => name_lists(1, LOCKS as usize),
            _ => name_lists(2, 2),
        };
        let mut sets: Vec<Vec<Vec<u8>>> = vec![Vec::new()];
        for _ in 0..self.clients {
            sets = sets
                .iter()
                .flat_map(|set| {
                    lists.iter().map(move |list| {
                        let mut more = set.clone();
                        more.push(list.clone());
                        more
                    })
                })
                .collect();
        }
        // Two clients: their sets overlap. Three: any (a cycle needs all).
        sets.retain(|set| set.len() > 2 || set[0].iter().any(|n| set[1].contains(n)));
        sets.into_iter()
            .map(|set| LockAllState {
                holders: [None; LOCKS as usize],
                queues: Default::default(),
                clients: set
                    .into_iter()
                    .map(|mut parts| {
                        if self.rule == LockAllRule::Sorted {
                            parts.sort_unstable();
                        }
                        Client {
                            parts,
                            held: 0,
                            phase: Phase::Start,
                        }
                    })
                    .collect(),
            })
            .collect()
    }

    fn actions(&self, state: &LockAllState, actions: &mut Vec<LockAllAction>) {
        for (c, client) in state.clients.iter().enumerate() {
            let c = c as u8;
            match client.phase {
                Phase::Start => actions.push(LockAllAction::Start(c)),
                Phase::Taking => actions.push(LockAllAction::Take(c)),
                Phase::Holding => actions.push(LockAllAction::Release(c)),
                Phase::Waiting | Phase::Done => {}
            }
        }
    }

    fn next_state(&self, last: &LockAllState, action: LockAllAction) -> Option<LockAllState> {
        let mut s = last.clone();
        match action {
            LockAllAction::Start(c) => {
                let client = &s.clients[c as usize];
                if self.atomic && client.parts.iter().all(|p| s.free(*p)) {
                    for part in client.parts.clone() {
                        s.holders[part as usize] = Some(c);
                    }
                    let client = &mut s.clients[c as usize];
                    client.held = client.parts.len() as u8;
                    client.phase = Phase::Holding;
                } else {
                    s.clients[c as usize].phase = Phase::Taking;
                }
            }
            LockAllAction::Take(c) => {
                let client = &s.clients[c as usize];
                let part = client.parts[usize::from(client.held)];
                if s.free(part) {
                    s.holders[part as usize] = Some(c);
                    let client = &mut s.clients[c as usize];
                    client.held += 1;
                    if usize::from(client.held) == client.parts.len() {
                        client.phase = Phase::Holding;
                    }
                } else {
                    s.queues[part as usize].push(c);
                    s.clients[c as usize].phase = Phase::Waiting;
                }
            }
            LockAllAction::Release(c) => {
                for part in s.clients[c as usize].parts.clone() {
                    s.hand_off(part);
                }
                s.clients[c as usize].phase = Phase::Done;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("no deadlock", |m: &LockAllModel, s: &LockAllState| {
                let mut moves = Vec::new();
                m.actions(s, &mut moves);
                !moves.is_empty() || s.clients.iter().all(|c| c.phase == Phase::Done)
            }),
            Property::sometimes("a client waits holding a part", |_, s: &LockAllState| {
                s.clients
                    .iter()
                    .any(|c| c.phase == Phase::Waiting && c.held > 0)
            }),
        ]
    }
}
