//! The history: one JSON object per line, every operation of every process
//! as invoke / ok / fail, stamped with the machine's monotonic clock (all
//! processes run on one machine, so their stamps compare).

use serde::{Deserialize, Serialize};

/// Who recorded an event.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// A client process contending for the locks.
    Client,
    /// The protected register.
    Register,
    /// The fault injector.
    Nemesis,
    /// The harness itself (client exits, what it found left behind).
    Harness,
}

/// What happened.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Op {
    /// Client: acquire the lock (ok carries the fencing token).
    Acquire,
    /// Client: read the register under the lock.
    Read,
    /// Client: write the register under the lock.
    Write,
    /// Client: release the lock.
    Release,
    /// Client: the guard's lost signal fired.
    Lost,
    /// Client: the guard said the lock is no longer held, so the write was
    /// skipped.
    Skip,
    /// Register: a read or write it served or refused (see the verdicts).
    Serve,
    /// Nemesis: SIGKILL of the client in `client`.
    Kill,
    /// Nemesis: SIGSTOP of a client (ok = SIGCONT).
    Pause,
    /// Nemesis: a client cut off from the store (ok = healed).
    Partition,
    /// Nemesis: a store node killed or restarted (ok = back).
    Node,
    /// Nemesis: a store node's wall clock jumped.
    Clock,
    /// Harness: the run began (`detail` names the backend, `fencing` says
    /// whether its tokens fence).
    Start,
    /// Harness: a client process ended.
    Exit,
    /// Harness: a lock still held after the run plus its TTL.
    Leftover,
}

/// A write its resource refused because the lock had passed on: the
/// resource's stale refusal, then the client's failed write.
pub fn refused_write(client: u32, lock: &str, token: u64, why: &str) -> [Event; 2] {
    let mut serve = Event::now(Source::Register, Op::Serve, Phase::Fail)
        .client(client)
        .lock(lock)
        .token(token)
        .detail("write");
    serve.stale = true;
    let failed = Event::now(Source::Client, Op::Write, Phase::Fail)
        .client(client)
        .lock(lock)
        .detail(why);
    [serve, failed]
}

/// Whether an operation started, succeeded or failed.
#[derive(Serialize, Deserialize, Clone, Copy, Debug, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
pub enum Phase {
    /// The operation started.
    Invoke,
    /// It succeeded.
    Ok,
    /// It failed (`detail` says how).
    Fail,
}

/// One line of the history.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq)]
pub struct Event {
    /// Monotonic clock, nanoseconds.
    pub t: u64,
    /// Who recorded it.
    pub src: Source,
    /// What happened.
    pub op: Op,
    /// Invoke, ok or fail.
    pub phase: Phase,
    /// The client it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub client: Option<u32>,
    /// The lock it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lock: Option<String>,
    /// The fencing token involved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<u64>,
    /// The register value read or written.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub value: Option<i64>,
    /// Register only: the token was below the highest the register had seen.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub stale: bool,
    /// Register only: a write whose expected value was not the current one
    /// (it overwrote an update it never read).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub lost_update: bool,
    /// Client acquire ok of a semaphore permit or a read-write lock side:
    /// `(weight, capacity)` (a permit or a reader weighs 1, a writer the
    /// whole capacity), which the checker counts the holders against.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub share: Option<(u64, u64)>,
    /// Harness start only: whether the store's tokens are fencing tokens.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fencing: Option<bool>,
    /// Free text: an error, a signal, a node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl Event {
    /// An event stamped now.
    pub fn now(src: Source, op: Op, phase: Phase) -> Event {
        Event {
            t: monotonic_ns(),
            src,
            op,
            phase,
            client: None,
            lock: None,
            token: None,
            value: None,
            stale: false,
            lost_update: false,
            share: None,
            fencing: None,
            detail: None,
        }
    }

    /// Sets the client.
    pub fn client(mut self, client: u32) -> Event {
        self.client = Some(client);
        self
    }

    /// Sets the lock.
    pub fn lock(mut self, lock: &str) -> Event {
        self.lock = Some(lock.to_string());
        self
    }

    /// Sets the token.
    pub fn token(mut self, token: u64) -> Event {
        self.token = Some(token);
        self
    }

    /// Sets the value.
    pub fn value(mut self, value: i64) -> Event {
        self.value = Some(value);
        self
    }

    /// Sets the detail.
    pub fn detail(mut self, detail: impl Into<String>) -> Event {
        self.detail = Some(detail.into());
        self
    }

    /// The JSON line (no newline).
    pub fn to_line(&self) -> String {
        serde_json::to_string(self).expect("an event always serializes")
    }
}

/// CLOCK_MONOTONIC in nanoseconds: the same clock in every process of the
/// machine, unlike `Instant`, which cannot leave its process.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; CLOCK_MONOTONIC always exists
    // on Linux.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Reads a history file; lines that do not parse are errors (a history the
/// checker cannot read is not a passing one).
pub fn read(text: &str) -> Result<Vec<Event>, String> {
    text.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim().is_empty())
        .map(|(n, line)| {
            serde_json::from_str(line).map_err(|e| format!("history line {}: {e}", n + 1))
        })
        .collect()
}
