//! The state of the Redlock model: the nodes, the commands on each
//! connection, the clients, and the documented conditions seen so far;
//! and its canonical form.

use super::{NODES, RedlockFaults};

/// A state of the nodes, the connections and the clients.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RedlockState {
    pub(super) now: u8,
    pub(super) nodes: [Node; NODES],
    /// Per client and node, the commands sent and not run yet, in order.
    pub(super) wire: [[Wire; NODES]; 2],
    pub(super) clients: [Client; 2],
    /// Rounds each client started: its round number is its token.
    pub(super) rounds: [u8; 2],
    pub(super) left: RedlockFaults,
    /// The documented conditions seen so far.
    pub(super) happened: Happened,
}

/// Which documented conditions happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(super) struct Happened {
    /// A node restarted empty, serving at once, and lost a live key.
    pub(super) restart_lost_a_key: bool,
    /// A node's clock jumped past the drift allowance with a live key.
    pub(super) clock_beyond_drift: bool,
    /// A paused holder's validity ran out before it woke.
    pub(super) paused_past_validity: bool,
}

impl Happened {
    pub(super) fn any(self) -> bool {
        self.restart_lost_a_key || self.clock_beyond_drift || self.paused_past_validity
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(super) struct Node {
    /// The key: (client, token, expiry on this node's clock).
    pub(super) key: Option<(u8, u8, u8)>,
    /// How far this node's clock is ahead of real time.
    pub(super) skew: u8,
    /// Down (restarting) until this tick.
    pub(super) down_until: u8,
}

/// The commands on one connection, oldest first (a round's `SET` and its
/// undo or release).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub(super) struct Wire([Option<Cmd>; 2]);

impl Wire {
    pub(super) fn is_empty(&self) -> bool {
        self.0[0].is_none()
    }

    fn push(&mut self, cmd: Cmd) {
        let free = self.0.iter_mut().find(|c| c.is_none());
        *free.expect("a round and its undo or release") = Some(cmd);
    }

    /// Takes the oldest command.
    pub(super) fn pop(&mut self) -> Option<Cmd> {
        let first = self.0[0].take()?;
        self.0.rotate_left(1);
        Some(first)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Cmd {
    Set(u8),
    Del(u8),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Vote {
    Sent,
    Granted,
    Refused,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Client {
    Idle,
    Round {
        token: u8,
        start: u8,
        votes: [Vote; NODES],
    },
    Holding {
        token: u8,
        until: u8,
        paused: bool,
    },
    Crashed,
}

impl RedlockState {
    pub(super) fn up(&self, n: usize) -> bool {
        self.now >= self.nodes[n].down_until
    }

    /// Drops the keys whose life ran out on their node's clock.
    pub(super) fn expire(&mut self) {
        for node in &mut self.nodes {
            if node
                .key
                .is_some_and(|(_, _, expiry)| expiry <= self.now + node.skew)
            {
                node.key = None;
            }
        }
    }

    /// Sends `cmd` on client `c`'s connection to every node that is up.
    /// A delete with nothing before it on a connection runs at once:
    /// running it later would only keep a key longer, which refuses other
    /// clients and never adds a holder (each client makes one round), so
    /// the model spares the checker those orders.
    pub(super) fn send_all(&mut self, c: u8, cmd: Cmd) {
        for n in 0..NODES {
            if !self.up(n) {
                continue;
            }
            match cmd {
                Cmd::Del(token) if self.wire[c as usize][n].is_empty() => self.delete(n, c, token),
                _ => self.wire[c as usize][n].push(cmd),
            }
        }
    }

    /// Node `n` deletes client `c`'s key if its token is `token`.
    pub(super) fn delete(&mut self, n: usize, c: u8, token: u8) {
        let node = &mut self.nodes[n];
        if node
            .key
            .is_some_and(|(owner, t, _)| owner == c && t == token)
        {
            node.key = None;
        }
    }

    /// Whether client `c` believes it holds the lock now.
    pub(super) fn believes(&self, c: usize) -> bool {
        matches!(self.clients[c], Client::Holding { until, paused, .. } if paused || self.now < until)
    }

    pub(super) fn holders(&self) -> usize {
        (0..2).filter(|c| self.believes(*c)).count()
    }

    /// The same state in a canonical form: nodes are interchangeable, and
    /// so are the two clients, so states that differ only in which node or
    /// which client is which are one state to the checker (up to 12 times
    /// fewer). Node and client numbers in a counterexample are positions
    /// in that form at each step.
    pub(super) fn canonical(self) -> Self {
        let swapped = self.swap_clients().sort_nodes();
        let kept = self.sort_nodes();
        kept.min(swapped)
    }

    /// The same state with client 0 and client 1 exchanged.
    fn swap_clients(mut self) -> Self {
        self.clients.swap(0, 1);
        self.rounds.swap(0, 1);
        self.wire.swap(0, 1);
        for node in &mut self.nodes {
            if let Some((client, _, _)) = &mut node.key {
                *client = 1 - *client;
            }
        }
        self
    }

    /// The same state with its nodes sorted.
    fn sort_nodes(mut self) -> Self {
        let votes = |c: &Client, n: usize| match c {
            Client::Round { votes, .. } => Some(votes[n]),
            _ => None,
        };
        let rank = |n: usize| {
            (
                self.nodes[n],
                self.wire[0][n],
                self.wire[1][n],
                votes(&self.clients[0], n),
                votes(&self.clients[1], n),
            )
        };
        let mut order: [usize; NODES] = std::array::from_fn(|n| n);
        order.sort_by_key(|n| rank(*n));
        if order.iter().enumerate().all(|(i, n)| i == *n) {
            return self;
        }
        let nodes = self.nodes;
        let wire = self.wire;
        for (to, from) in order.into_iter().enumerate() {
            self.nodes[to] = nodes[from];
            for (mine, theirs) in self.wire.iter_mut().zip(&wire) {
                mine[to] = theirs[from];
            }
        }
        for client in &mut self.clients {
            if let Client::Round { votes, .. } = client {
                let before = *votes;
                for (to, from) in order.into_iter().enumerate() {
                    votes[to] = before[from];
                }
            }
        }
        self
    }
}
