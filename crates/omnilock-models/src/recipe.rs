//! The queue of ordered keys that etcd and ZooKeeper keep: one key (node)
//! per contender, ordered by a number the store draws (etcd's create
//! revision, ZooKeeper's sequence), the oldest holding, each on its
//! contender's lease (session).
//!
//! Follows `crates/omnilock-etcd/src/queue.rs`: `Etcd::enqueue` (one
//! transaction puts the key only if it does not exist, so a retried
//! enqueue finds the key the lost attempt put), `Etcd::recheck` and
//! `Etcd::turn_at` (a waiter woken by its predecessor's deletion reads
//! again what is ahead of it, rather than assuming it holds), `abandon` and
//! `Etcd::delete_if_created` (a dropped acquire or a release deletes the
//! key only if it is still the one created at its revision). A key is named
//! by its owner, and core lends an owner to the next acquisition only once
//! a release deleted that owner's key (`Shared::lend_owner` and
//! `give_back_owner` in `crates/omnilock-core/src/shared.rs`, for
//! `reuses_owners` in `crates/omnilock-etcd/src/store.rs`). ZooKeeper's
//! recipe is the same, in `crates/omnilock-zookeeper/src/queue.rs`
//! (`create_node`, which finds its node by its unique prefix after a lost
//! answer, `position` and `wait_turn`). A lease (session) that runs out
//! deletes its keys.
//!
//! Faults, each at any step: a key's lease runs out (a holder is told; a
//! waiter finds its key gone at its next look and queues again, at the
//! back); a client crashes (its keys stay until its lease runs out); an
//! acquire is dropped while it waits or while its enqueue is on the wire
//! (the key is then deleted in the background); a request is applied
//! twice (an enqueue whose answer was lost is sent again; a delete is
//! retried).
//!
//! Properties: **at most one holder**, **a holder's key is the oldest**,
//! and **no waiter passed by a later one** (a grant never goes to a key
//! younger than the key of a client still waiting).
//!
//! Against the real stores: the conformance scenarios `mutual_exclusion`,
//! `fifo_order`, `cancelled_acquire_leaves_nothing`,
//! `stale_release_is_not_owner` and `abandoned_holder_expires`, run on
//! etcd (both modes) and ZooKeeper.

use stateright::{Model, Property};

use crate::faults::Faults;

/// The rule under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecipeRule {
    /// The stores' recipe.
    Store,
    /// Broken: a waiter whose predecessor's key is deleted takes itself for
    /// the holder without reading the queue again (the predecessor may
    /// have been a waiter that gave up, with the holder still ahead).
    PredecessorGoneMeansHeld,
    /// Broken: a release or a dropped acquire deletes the key by its name
    /// (its owner), whatever revision it has, so the late copy of a retried
    /// release deletes the key of the next acquisition by the same owner.
    DeleteByName,
}

/// Clients contending through one lock's range of keys.
#[derive(Debug, Clone)]
pub struct RecipeModel {
    /// How many clients contend.
    pub clients: u8,
    /// How many acquisitions each client makes.
    pub rounds: u8,
    /// The faults one run may see.
    pub faults: Faults,
    /// The rule under test.
    pub rule: RecipeRule,
}

/// A state of the key range and the clients.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecipeState {
    /// The keys, oldest first: (revision, client, owner: the key's name).
    keys: Vec<(u8, u8, u8)>,
    last_rev: u8,
    clients: Vec<Client>,
    rounds: Vec<u8>,
    /// Each client's owner: the name of the keys it puts.
    owners: Vec<u8>,
    /// Whether a client's owner may be lent again (its release deleted its
    /// key).
    spare: Vec<bool>,
    last_owner: u8,
    /// Deletes sent and not applied yet: (client, owner, revision), sorted.
    deletes: Vec<(u8, u8, u8)>,
    left: Faults,
    passed: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
enum Client {
    Idle,
    /// The enqueue transaction is on its way (or being retried); if the
    /// acquire was dropped meanwhile, its undo deletes the key it puts.
    Enqueuing {
        dropped: bool,
    },
    /// Waiting behind the key `ahead` (as last read).
    Waiting {
        rev: u8,
        ahead: u8,
    },
    Holding {
        rev: u8,
    },
    /// Told that the hold of the key `rev` was lost.
    Lost {
        rev: u8,
    },
    /// Its release (the delete of key `rev`) is on its way.
    Releasing {
        rev: u8,
    },
    Crashed,
}

/// One step of a client, of the store, or a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RecipeAction {
    /// The client sends its enqueue transaction.
    Acquire(u8),
    /// The store runs the client's enqueue; with `.1`, the answer is lost
    /// and the client retries the transaction.
    Enqueue(u8, bool),
    /// A waiter reads again what is ahead of its key (its watch fired, or
    /// its periodic look).
    Recheck(u8),
    /// The client sends the delete of its key (a release).
    Release(u8),
    /// The store runs delete `.0` of those in flight; with `.1`, a retried
    /// copy stays in flight.
    Delete(usize, bool),
    /// The lease of the key at position `.0` runs out.
    Expire(usize),
    /// A waiting acquire is dropped: its key is deleted in the background.
    Cancel(u8),
    /// The client stops for good; its keys stay until its lease runs out.
    Crash(u8),
}

impl RecipeState {
    /// The key named by `client`'s owner, if there is one.
    fn key_of(&self, client: u8) -> Option<u8> {
        let owner = self.owners[client as usize];
        self.keys.iter().find(|k| k.2 == owner).map(|k| k.0)
    }

    fn send_delete(&mut self, client: u8, rev: u8) {
        self.deletes
            .push((client, self.owners[client as usize], rev));
        self.deletes.sort_unstable();
    }

    /// Where the key `rev` stands: `None` if it is gone, else the key just
    /// before it (`None` inside: nothing, it holds).
    fn turn(&self, rev: u8) -> Option<Option<u8>> {
        let at = self.keys.iter().position(|k| k.0 == rev)?;
        Some(at.checked_sub(1).map(|before| self.keys[before].0))
    }

    /// `client` (key `rev`) now holds: noted if a client still waits on
    /// an older key (one whose key is gone has lost its place).
    fn hold(&mut self, client: u8, rev: u8) {
        self.passed |= self.clients.iter().any(|c| match c {
            Client::Waiting { rev: theirs, .. } => {
                *theirs < rev && self.keys.iter().any(|k| k.0 == *theirs)
            }
            _ => false,
        });
        self.clients[client as usize] = Client::Holding { rev };
    }

    /// The client with key `rev` learns where it stands.
    fn look(&mut self, client: u8, rev: u8) {
        self.clients[client as usize] = match self.turn(rev) {
            // Its key is gone (its lease ran out): it queues again.
            None => Client::Enqueuing { dropped: false },
            Some(None) => return self.hold(client, rev),
            Some(Some(ahead)) => Client::Waiting { rev, ahead },
        };
    }

    fn holding(&self) -> impl Iterator<Item = u8> + '_ {
        self.clients.iter().filter_map(|c| match c {
            Client::Holding { rev } => Some(*rev),
            _ => None,
        })
    }
}

impl Model for RecipeModel {
    type State = RecipeState;
    type Action = RecipeAction;

    fn init_states(&self) -> Vec<RecipeState> {
        let n = self.clients as usize;
        vec![RecipeState {
            keys: Vec::new(),
            last_rev: 0,
            clients: vec![Client::Idle; n],
            rounds: vec![self.rounds; n],
            owners: vec![0; n],
            spare: vec![false; n],
            last_owner: 0,
            deletes: Vec::new(),
            left: self.faults,
            passed: false,
        }]
    }

    fn actions(&self, state: &RecipeState, actions: &mut Vec<RecipeAction>) {
        for (c, client) in state.clients.iter().enumerate() {
            let c = c as u8;
            match client {
                Client::Idle if state.rounds[c as usize] > 0 => {
                    actions.push(RecipeAction::Acquire(c));
                }
                Client::Enqueuing { dropped } => {
                    actions.push(RecipeAction::Enqueue(c, false));
                    if state.left.duplicates > 0 {
                        actions.push(RecipeAction::Enqueue(c, true));
                    }
                    if !dropped && state.left.cancels > 0 {
                        actions.push(RecipeAction::Cancel(c));
                    }
                }
                Client::Waiting { .. } => {
                    actions.push(RecipeAction::Recheck(c));
                    if state.left.cancels > 0 {
                        actions.push(RecipeAction::Cancel(c));
                    }
                }
                Client::Holding { .. } | Client::Lost { .. } => {
                    actions.push(RecipeAction::Release(c));
                }
                _ => {}
            }
            if client != &Client::Crashed && state.left.crashes > 0 {
                actions.push(RecipeAction::Crash(c));
            }
        }
        for i in 0..state.deletes.len() {
            actions.push(RecipeAction::Delete(i, false));
            if state.left.duplicates > 0 {
                actions.push(RecipeAction::Delete(i, true));
            }
        }
        for (i, key) in state.keys.iter().enumerate() {
            if state.left.expiries > 0 || state.clients[key.1 as usize] == Client::Crashed {
                actions.push(RecipeAction::Expire(i));
            }
        }
    }

    fn next_state(&self, last: &RecipeState, action: RecipeAction) -> Option<RecipeState> {
        let mut s = last.clone();
        match action {
            RecipeAction::Acquire(c) => {
                let at = c as usize;
                s.rounds[at] -= 1;
                if !std::mem::take(&mut s.spare[at]) {
                    s.last_owner += 1;
                    s.owners[at] = s.last_owner;
                }
                s.clients[at] = Client::Enqueuing { dropped: false };
            }
            RecipeAction::Enqueue(c, answer_lost) => {
                let Client::Enqueuing { dropped } = s.clients[c as usize] else {
                    return None;
                };
                // Put only if the key does not exist; else it is ours
                // from an attempt whose answer was lost.
                let rev = match s.key_of(c) {
                    Some(rev) => rev,
                    None => {
                        s.last_rev += 1;
                        s.keys.push((s.last_rev, c, s.owners[c as usize]));
                        s.last_rev
                    }
                };
                if answer_lost && s.left.take_duplicate() {
                    return Some(s);
                }
                if dropped {
                    s.send_delete(c, rev);
                    s.clients[c as usize] = Client::Idle;
                } else {
                    s.look(c, rev);
                }
            }
            RecipeAction::Recheck(c) => {
                let Client::Waiting { rev, ahead } = s.clients[c as usize] else {
                    return None;
                };
                let broken = self.rule == RecipeRule::PredecessorGoneMeansHeld;
                let mine = s.keys.iter().any(|k| k.0 == rev);
                if broken && mine {
                    if s.keys.iter().any(|k| k.0 == ahead) {
                        return None;
                    }
                    s.hold(c, rev);
                } else {
                    s.look(c, rev);
                }
            }
            RecipeAction::Release(c) => {
                let (Client::Holding { rev } | Client::Lost { rev }) = s.clients[c as usize] else {
                    return None;
                };
                s.send_delete(c, rev);
                s.clients[c as usize] = Client::Releasing { rev };
            }
            RecipeAction::Delete(i, again) => {
                let (c, owner, rev) = s.deletes[i];
                if !again || !s.left.take_duplicate() {
                    s.deletes.remove(i);
                }
                let by_name = self.rule == RecipeRule::DeleteByName;
                let before = s.keys.len();
                s.keys
                    .retain(|k| !(k.2 == owner && (k.0 == rev || by_name)));
                if s.clients[c as usize] == (Client::Releasing { rev }) {
                    // The release answers; only one that deleted the key
                    // gives its owner back.
                    s.spare[c as usize] = s.keys.len() < before;
                    s.clients[c as usize] = Client::Idle;
                }
            }
            RecipeAction::Expire(i) => {
                let (rev, c, _) = s.keys.remove(i);
                let client = &mut s.clients[c as usize];
                match *client {
                    Client::Crashed => {}
                    _ if !s.left.take_expiry() => return None,
                    Client::Holding { rev: held } if held == rev => *client = Client::Lost { rev },
                    _ => {}
                }
            }
            RecipeAction::Cancel(c) => {
                s.left.take_cancel();
                match s.clients[c as usize] {
                    Client::Waiting { rev, .. } => {
                        s.send_delete(c, rev);
                        s.clients[c as usize] = Client::Idle;
                    }
                    Client::Enqueuing { .. } => {
                        s.clients[c as usize] = Client::Enqueuing { dropped: true };
                    }
                    _ => return None,
                }
            }
            RecipeAction::Crash(c) => {
                s.left.take_crash();
                s.clients[c as usize] = Client::Crashed;
            }
        }
        Some(s)
    }

    fn properties(&self) -> Vec<Property<Self>> {
        vec![
            Property::always("at most one holder", |_, s: &RecipeState| {
                s.holding().count() <= 1
            }),
            Property::always("a holder's key is the oldest", |_, s: &RecipeState| {
                s.holding()
                    .all(|rev| s.keys.first().is_some_and(|k| k.0 == rev))
            }),
            Property::always("no waiter passed by a later one", |_, s: &RecipeState| {
                !s.passed
            }),
            Property::sometimes("two clients wait behind a holder", |_, s: &RecipeState| {
                let waiting = s
                    .clients
                    .iter()
                    .filter(|c| matches!(c, Client::Waiting { .. }));
                s.holding().count() == 1 && waiting.count() >= 2
            }),
        ]
    }
}
