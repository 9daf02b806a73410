//! Redlock: a lock held while a majority of N independent nodes granted it
//! within its validity time.
//!
//! Follows `crates/omnilock-redis/src/redlock/round.rs`:
//! `RedlockStore::round_votes` (one token per round sent to every node;
//! held when a majority granted and validity = TTL − elapsed − drift is
//! positive, so the hold is believed until start + TTL − drift; otherwise
//! the partial grant is undone on every node, including those that have not
//! answered), `RedlockStore::node_reply` (`SET NX PX`: a node grants when
//! it has no live key), and `redlock/release.rs` (a release deletes a key
//! only with its owner and token). Each connection runs its commands in
//! order, so an undo or a release follows the grant it undoes. Every node
//! measures its keys' lives on its own clock; time passes in ticks.
//!
//! docs/backends/redis.md says when Redlock can give the lock to two
//! clients: a node restarted without persistence (and without waiting a
//! TTL before it serves again), a node clock that jumps ahead by more than
//! the drift allowance, and a holder paused past its validity (it wakes and
//! acts as the holder). The model records each of these in the state when
//! it happens. Property: **two holders only after a documented condition**;
//! and in runs where none can happen, **at most one holder**, through
//! restarts with persistence, restarts that wait a TTL, clock jumps within
//! the allowance and client crashes. A second property, `sometimes`, shows
//! that each documented condition can in fact lead to two holders.
//!
//! Sizes: 3 nodes, 2 clients of one round each, over one TTL of time (3
//! ticks, a drift allowance of 1). Three choices keep the runs small, none
//! of which hides a second holder: a delete (an undo or a release) with
//! nothing queued before it on its connection runs at once (running it
//! later only keeps a key longer, which refuses others and never adds a
//! holder, each client making one round); a key is dropped as soon as its
//! life runs out; and with `symmetry`, states that differ only in which
//! node or which client is which count as one.
//!
//! Against the real stores: the conformance scenario `mutual_exclusion` on
//! Redlock, `redlock_faults::majority_rules`
//! (`crates/omnilock-redis/tests/redlock_faults.rs`: 2 of 5 nodes paused,
//! still one holder), and the fault harness's `majority-restart`, `clock`
//! and `pause` faults (`crates/omnilock-chaos`, docs/reliability.md), which
//! build each documented condition against real servers and count the
//! locks another client took from a live holder.

use stateright::{Model, Property};

mod state;

pub use state::RedlockState;
use state::{Client, Cmd, Happened, Node, Vote, Wire};

/// Nodes: 3, so a majority is 2.
pub const NODES: usize = 3;
const QUORUM: usize = NODES / 2 + 1;
/// The lease (TTL), in ticks.
pub const TTL: u8 = 3;
/// The drift allowance, in ticks: a hold is believed until start + TTL −
/// `DRIFT`.
pub const DRIFT: u8 = 1;
/// Rounds each client makes.
const ROUNDS: u8 = 1;

/// How a node comes back from a restart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Restart {
    /// With its keys (AOF, `appendfsync always`).
    Persistent,
    /// Empty, serving at once: a documented condition.
    Empty,
    /// Empty, but serving again only after a TTL (Redlock's own remedy).
    EmptyAfterTtl,
}

/// The faults one run may see.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RedlockFaults {
    /// How many node restarts, and of which kind.
    pub restarts: (u8, Restart),
    /// How many clock jumps, and by how many ticks each (more than
    /// [`DRIFT`] in all on one node is a documented condition).
    pub jumps: (u8, u8),
    /// How many holders may pause (a pause past the validity is a
    /// documented condition).
    pub pauses: u8,
    /// How many clients may crash.
    pub crashes: u8,
}

/// The rule under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedlockRule {
    /// The store's rule.
    Store,
    /// Broken: the validity is counted from the last answer, not from the
    /// round's start, so the time the round took is not deducted.
    ValidityFromAnswer,
}

/// Two clients taking one lock over three nodes, one round each.
#[derive(Debug, Clone)]
pub struct RedlockModel {
    /// The ticks a run may last.
    pub horizon: u8,
    /// The faults one run may see.
    pub faults: RedlockFaults,
    /// The rule under test.
    pub rule: RedlockRule,
    /// Whether to go no further than a state where a documented condition
    /// has happened (the property "two holders only after a documented
    /// condition" holds there and in every later state). For the
    /// exhaustive check; the search for a second holder goes on.
    pub stop_at_condition: bool,
    /// Whether to keep states in a canonical form, nodes sorted and
    /// clients ordered: runs reach up to 12 times fewer states, but a
    /// trace's node and client numbers are then positions in that form at
    /// each step. Off, each keeps its own number, for reading a trace.
    pub symmetry: bool,
}

/// One step.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RedlockAction {
    /// Time passes by one tick.
    Tick,
    /// The client starts a round: `SET NX PX` to every node.
    Begin(u8),
    /// Node `.1` runs the next command on client `.0`'s connection.
    Run(u8, usize),
    /// The client counts its votes: held, or undone everywhere.
    Decide(u8),
    /// The holder releases on every node.
    Release(u8),
    /// Node `.0` restarts.
    Restart(usize),
    /// Node `.0`'s clock jumps ahead.
    Jump(usize),
    /// The holder pauses (and acts as the holder when it wakes).
    Pause(u8),
    /// The client stops for good.
    Crash(u8),
}

impl Model for RedlockModel {
    type State = RedlockState;
    type Action = RedlockAction;

    fn init_states(&self) -> Vec<RedlockState> {
        vec![RedlockState {
            now: 0,
            nodes: [Node::default(); NODES],
            wire: Default::default(),
            clients: [Client::Idle; 2],
            rounds: [0; 2],
            left: self.faults,
            happened: Happened::default(),
        }]
    }

    fn actions(&self, s: &RedlockState, actions: &mut Vec<RedlockAction>) {
        if s.now < self.horizon {
            actions.push(RedlockAction::Tick);
        }
        for c in 0..2u8 {
            match s.clients[c as usize] {
                Client::Idle if s.rounds[c as usize] < ROUNDS => {
                    actions.push(RedlockAction::Begin(c));
                }
                Client::Round { start, votes, .. } => {
                    let granted = votes.iter().filter(|v| **v == Vote::Granted).count();
                    let answered = !votes.contains(&Vote::Sent);
                    // A node silent for a tick has timed out.
                    if granted >= QUORUM || answered || s.now > start {
                        actions.push(RedlockAction::Decide(c));
                    }
                }
                Client::Holding { paused, until, .. } => {
                    actions.push(RedlockAction::Release(c));
                    // A holder past its validity knows it may have lost
                    // the lock; a pause matters before that.
                    if !paused && s.now < until && s.left.pauses > 0 {
                        actions.push(RedlockAction::Pause(c));
                    }
                }
                _ => {}
            }
            if s.clients[c as usize] != Client::Crashed && s.left.crashes > 0 {
                actions.push(RedlockAction::Crash(c));
            }
            for n in 0..NODES {
                if !s.wire[c as usize][n].is_empty() && s.up(n) {
                    actions.push(RedlockAction::Run(c, n));
                }
            }
        }
        for n in 0..NODES {
            if s.left.restarts.0 > 0 && s.up(n) {
                actions.push(RedlockAction::Restart(n));
            }
            if s.left.jumps.0 > 0 {
                actions.push(RedlockAction::Jump(n));
            }
        }
    }

    fn next_state(&self, last: &RedlockState, action: RedlockAction) -> Option<RedlockState> {
        let mut s = *last;
        match action {
            RedlockAction::Tick => {
                s.now += 1;
                s.expire();
                for c in 0..2 {
                    if let Client::Holding { until, paused, .. } = s.clients[c] {
                        s.happened.paused_past_validity |= paused && s.now >= until;
                    }
                }
            }
            RedlockAction::Begin(c) => {
                s.rounds[c as usize] += 1;
                let token = s.rounds[c as usize];
                s.send_all(c, Cmd::Set(token));
                s.clients[c as usize] = Client::Round {
                    token,
                    start: s.now,
                    votes: [Vote::Sent; NODES],
                };
            }
            RedlockAction::Run(c, n) => {
                let cmd = s.wire[c as usize][n].pop()?;
                let clock = s.now + s.nodes[n].skew;
                let node = &mut s.nodes[n];
                match cmd {
                    Cmd::Set(token) => {
                        let granted = node.key.is_none();
                        if granted {
                            node.key = Some((c, token, clock + TTL));
                        }
                        if let Client::Round {
                            token: round,
                            votes,
                            ..
                        } = &mut s.clients[c as usize]
                            && *round == token
                        {
                            votes[n] = if granted {
                                Vote::Granted
                            } else {
                                Vote::Refused
                            };
                        }
                    }
                    Cmd::Del(token) => s.delete(n, c, token),
                }
            }
            RedlockAction::Decide(c) => {
                let Client::Round {
                    token,
                    start,
                    votes,
                } = s.clients[c as usize]
                else {
                    return None;
                };
                let granted = votes.iter().filter(|v| **v == Vote::Granted).count();
                let elapsed = s.now - start;
                let (valid, until) = match self.rule {
                    RedlockRule::Store => (elapsed + DRIFT < TTL, start + TTL - DRIFT),
                    RedlockRule::ValidityFromAnswer => (true, s.now + TTL - DRIFT),
                };
                s.clients[c as usize] = if granted >= QUORUM && valid {
                    Client::Holding {
                        token,
                        until,
                        paused: false,
                    }
                } else {
                    s.send_all(c, Cmd::Del(token));
                    Client::Idle
                };
            }
            RedlockAction::Release(c) => {
                let Client::Holding { token, .. } = s.clients[c as usize] else {
                    return None;
                };
                s.send_all(c, Cmd::Del(token));
                s.clients[c as usize] = Client::Idle;
            }
            RedlockAction::Restart(n) => {
                s.left.restarts.0 -= 1;
                let live = s.nodes[n].key.is_some();
                // The connections drop: what was sent and not run is lost.
                for wire in &mut s.wire {
                    wire[n] = Wire::default();
                }
                match s.left.restarts.1 {
                    Restart::Persistent => {}
                    Restart::Empty => {
                        s.nodes[n].key = None;
                        s.happened.restart_lost_a_key |= live;
                    }
                    Restart::EmptyAfterTtl => {
                        s.nodes[n].key = None;
                        s.nodes[n].down_until = s.now + TTL + 1;
                    }
                }
            }
            RedlockAction::Jump(n) => {
                // Only the keys there now live shorter than they should:
                // a key set after the jump lives its TTL on the new clock.
                let live = s.nodes[n].key.is_some();
                s.left.jumps.0 -= 1;
                s.nodes[n].skew += s.left.jumps.1;
                s.expire();
                s.happened.clock_beyond_drift |= live && s.nodes[n].skew > DRIFT;
            }
            RedlockAction::Pause(c) => {
                let Client::Holding { paused, .. } = &mut s.clients[c as usize] else {
                    return None;
                };
                *paused = true;
                s.left.pauses -= 1;
            }
            RedlockAction::Crash(c) => {
                s.left.crashes -= 1;
                s.clients[c as usize] = Client::Crashed;
            }
        }
        Some(if self.symmetry { s.canonical() } else { s })
    }

    fn within_boundary(&self, s: &RedlockState) -> bool {
        !(self.stop_at_condition && s.happened.any())
    }

    fn properties(&self) -> Vec<Property<Self>> {
        let mut properties = vec![
            Property::always("at most one holder", |_, s: &RedlockState| s.holders() < 2),
            Property::always(
                "two holders only after a documented condition",
                |_, s: &RedlockState| s.holders() < 2 || s.happened.any(),
            ),
            Property::sometimes("a client holds", |_, s: &RedlockState| s.holders() == 1),
        ];
        let f = self.faults;
        let documented = (f.restarts.0 > 0 && f.restarts.1 == Restart::Empty)
            || f.jumps.0 * f.jumps.1 > DRIFT
            || f.pauses > 0;
        if documented && !self.stop_at_condition {
            properties.push(Property::sometimes("two holders", |_, s: &RedlockState| {
                s.holders() >= 2
            }));
        }
        properties
    }
}
