//! The offline checker: reads a history and counts what went right and
//! wrong. It trusts nothing the clients concluded; it only compares stamps,
//! tokens and the register's verdicts.

use std::collections::HashMap;

use serde::{Deserialize, Serialize};

use crate::history::{Event, Op, Phase, Source};

/// What one run did and what it broke. Counts are over the whole run.
#[derive(Serialize, Deserialize, Debug, Default, Clone, PartialEq)]
pub struct Report {
    /// The backend, as the run's start event named it.
    pub backend: String,
    /// How the run was set up (faults, locks, clients, duration, register);
    /// filled in by the harness, empty when a history is checked offline.
    pub setup: String,
    /// Whether its tokens are fencing tokens. Without them the token-based
    /// figures (stale writes, token order) mean nothing and are not
    /// violations; lost updates still are.
    pub fencing: bool,
    /// Successful acquisitions.
    pub acquisitions: u64,
    /// Acquisitions that failed (timeouts, store unreachable).
    pub acquire_failures: u64,
    /// Writes the register accepted.
    pub writes_accepted: u64,
    /// Holds during which another client was granted the same lock while
    /// this holder still believed it held it (from its grant until it
    /// released, noticed the loss or died). Expected under pauses and
    /// partitions; fencing exists for them.
    pub overlaps_seen_by_clients: u64,
    /// Writes whose token was below one the register had already seen, and
    /// which it accepted (unfenced mode). The safety violations.
    pub stale_writes_accepted: u64,
    /// The same, refused (fenced mode): fencing at work.
    pub stale_writes_refused: u64,
    /// Accepted writes that overwrote an update their writer never read.
    pub lost_updates: u64,
    /// Pairs where one hold was released before another was requested, yet
    /// the later one got a token not above the earlier one's.
    pub token_order_violations: u64,
    /// SIGKILLs of holders.
    pub kills: u64,
    /// SIGSTOPs of holders.
    pub pauses: u64,
    /// Holders cut off from the store.
    pub partitions: u64,
    /// Store nodes killed or restarted.
    pub node_faults: u64,
    /// Clock jumps on a store node.
    pub clock_jumps: u64,
    /// From a holder's death to the next grant of its lock to another client,
    /// in seconds: median and worst (only deaths followed by a grant).
    pub recovery_p50_s: Option<f64>,
    /// See `recovery_p50_s`.
    pub recovery_max_s: Option<f64>,
    /// Lost signals the clients' guards fired.
    pub lost_signals: u64,
    /// Holds another client was granted before their holder released them
    /// (the lock was actually lost while held).
    pub locks_lost: u64,
    /// Of those, the ones whose live holder never learned it (no lost
    /// signal, no refused write, no failed release).
    pub lost_unnoticed: u64,
    /// Locks still held after every client stopped and one TTL passed.
    pub leftovers: u64,
    /// Semaphores and read-write locks: grants that took more than the
    /// capacity (more than N permits, a reader beside a writer, two
    /// writers) while the holders already inside had not lost enough of
    /// it (none of the excess noticed its loss or was killed). The safety
    /// violation of these primitives.
    #[serde(default)]
    pub capacity_exceeded: u64,
}

impl Report {
    /// The figures, one per line, for people.
    pub fn table(&self) -> String {
        let seconds = |s: Option<f64>| s.map_or("-".to_string(), |s| format!("{s:.2} s"));
        let fenced = |count: u64| {
            if self.fencing {
                count.to_string()
            } else {
                format!("{count} (no fencing tokens: not meaningful)")
            }
        };
        let rows = [
            ("backend", self.backend.clone()),
            ("setup", self.setup.clone()),
            ("acquisitions", self.acquisitions.to_string()),
            ("acquire failures", self.acquire_failures.to_string()),
            ("writes accepted", self.writes_accepted.to_string()),
            (
                "faults: kill / pause / partition / node / clock",
                format!(
                    "{} / {} / {} / {} / {}",
                    self.kills, self.pauses, self.partitions, self.node_faults, self.clock_jumps
                ),
            ),
            (
                "overlaps seen by clients",
                self.overlaps_seen_by_clients.to_string(),
            ),
            (
                "stale writes accepted (violations)",
                fenced(self.stale_writes_accepted),
            ),
            (
                "stale writes refused (fencing)",
                fenced(self.stale_writes_refused),
            ),
            ("lost updates", self.lost_updates.to_string()),
            (
                "token order violations",
                fenced(self.token_order_violations),
            ),
            ("locks lost while held", self.locks_lost.to_string()),
            ("  of which never noticed", self.lost_unnoticed.to_string()),
            ("lost signals fired", self.lost_signals.to_string()),
            (
                "recovery after a kill p50 / max",
                format!(
                    "{} / {}",
                    seconds(self.recovery_p50_s),
                    seconds(self.recovery_max_s)
                ),
            ),
            ("locks left behind", self.leftovers.to_string()),
            (
                "grants beyond the capacity (violations)",
                self.capacity_exceeded.to_string(),
            ),
        ];
        rows.iter()
            .map(|(what, value)| format!("{what:<48} {value}"))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The safety violations: everything that must be 0 when the store and
    /// the register are expected to be safe.
    pub fn violations(&self) -> Vec<String> {
        let mut found = Vec::new();
        let mut check = |count: u64, what: &str| {
            if count > 0 {
                found.push(format!("{count} {what}"));
            }
        };
        if self.fencing {
            check(self.stale_writes_accepted, "stale writes accepted");
            check(self.token_order_violations, "token order violations");
        }
        check(self.lost_updates, "lost updates");
        check(self.lost_unnoticed, "lost locks their holder never noticed");
        check(self.leftovers, "locks left behind");
        check(
            self.capacity_exceeded,
            "grants beyond the capacity that no holder lost",
        );
        found
    }
}

#[derive(Debug)]
struct Hold {
    client: u32,
    token: u64,
    requested: u64,
    granted: u64,
    /// Until when the client believed it held the lock.
    believed_until: Option<u64>,
    /// When it stopped holding on its own account: release call, death.
    gave_up: Option<u64>,
    released_ok: Option<u64>,
    noticed: bool,
    killed: bool,
    /// `(weight, capacity)` of a semaphore permit or read-write lock side.
    share: Option<(u64, u64)>,
}

/// Checks a history (in any order; it is sorted by stamp first).
pub fn check(events: &[Event]) -> Report {
    let mut events: Vec<&Event> = events.iter().collect();
    events.sort_by_key(|e| e.t);
    let mut report = Report::default();
    let mut holds: HashMap<String, Vec<Hold>> = HashMap::new();
    // Per client and lock: the index of its open hold (a client of
    // `lock_all` holds several at once); per client, its last request.
    let mut open: HashMap<(u32, String), usize> = HashMap::new();
    let mut requested: HashMap<u32, u64> = HashMap::new();
    let mut deaths: Vec<(String, u32, u64)> = Vec::new();

    for e in events {
        let client = e.client.unwrap_or(u32::MAX);
        let lock = e.lock.clone().unwrap_or_default();
        let current = |open: &HashMap<(u32, String), usize>| {
            let i = *open.get(&(client, lock.clone()))?;
            Some((lock.clone(), i))
        };
        match (e.src, e.op, e.phase) {
            (Source::Client, Op::Acquire, Phase::Invoke) => {
                requested.insert(client, e.t);
            }
            (Source::Client, Op::Acquire, Phase::Ok) => {
                report.acquisitions += 1;
                let list = holds.entry(lock.clone()).or_default();
                list.push(Hold {
                    client,
                    token: e.token.unwrap_or(0),
                    requested: requested.get(&client).copied().unwrap_or(e.t),
                    granted: e.t,
                    believed_until: None,
                    gave_up: None,
                    released_ok: None,
                    noticed: false,
                    killed: false,
                    share: e.share,
                });
                open.insert((client, lock.clone()), list.len() - 1);
            }
            (Source::Client, Op::Acquire, Phase::Fail) => report.acquire_failures += 1,
            (Source::Client, Op::Lost | Op::Skip, _) => {
                if e.op == Op::Lost {
                    report.lost_signals += 1;
                }
                if let Some(hold) = current(&open).and_then(|(l, i)| holds.get_mut(&l)?.get_mut(i))
                {
                    // A late signal of an earlier hold must not mark this one.
                    if e.token.is_none_or(|token| token == hold.token) {
                        hold.noticed = true;
                        hold.believed_until.get_or_insert(e.t);
                    }
                }
            }
            (Source::Client, Op::Write | Op::Read, Phase::Fail) => {
                if let Some(hold) = current(&open).and_then(|(l, i)| holds.get_mut(&l)?.get_mut(i))
                {
                    hold.noticed = true;
                    hold.believed_until.get_or_insert(e.t);
                }
            }
            (Source::Client, Op::Release, phase) => {
                if let Some((lock, i)) = current(&open) {
                    let hold = &mut holds.get_mut(&lock).expect("open hold")[i];
                    hold.believed_until.get_or_insert(e.t);
                    hold.gave_up.get_or_insert(e.t);
                    match phase {
                        Phase::Invoke => {}
                        Phase::Ok => {
                            hold.released_ok = Some(e.t);
                            open.remove(&(client, lock));
                        }
                        Phase::Fail => {
                            hold.noticed = true;
                            open.remove(&(client, lock));
                        }
                    }
                }
            }
            (Source::Nemesis, Op::Kill, Phase::Invoke) => {
                report.kills += 1;
                end_by_death(&mut holds, &mut open, &mut deaths, client, e.t, true);
            }
            (Source::Harness, Op::Exit, _) => {
                end_by_death(&mut holds, &mut open, &mut deaths, client, e.t, false);
            }
            (Source::Nemesis, Op::Pause, Phase::Invoke) => report.pauses += 1,
            (Source::Nemesis, Op::Partition, Phase::Invoke) => report.partitions += 1,
            (Source::Nemesis, Op::Node, Phase::Invoke) => report.node_faults += 1,
            (Source::Nemesis, Op::Clock, Phase::Invoke) => report.clock_jumps += 1,
            (Source::Register, Op::Serve, verdict) => {
                let write = e.detail.as_deref() == Some("write");
                match (write, verdict, e.stale) {
                    (true, Phase::Ok, true) => report.stale_writes_accepted += 1,
                    (true, Phase::Fail, true) => report.stale_writes_refused += 1,
                    _ => {}
                }
                if write && verdict == Phase::Ok {
                    report.writes_accepted += 1;
                    if e.lost_update {
                        report.lost_updates += 1;
                    }
                }
            }
            (Source::Harness, Op::Leftover, _) => report.leftovers += 1,
            (Source::Harness, Op::Start, _) => {
                report.backend = e.detail.clone().unwrap_or_default();
                report.fencing = e.fencing.unwrap_or(false);
            }
            _ => {}
        }
    }

    let mut recoveries = Vec::new();
    for list in holds.values_mut() {
        list.sort_by_key(|h| h.granted);
        if list.iter().any(|h| h.share.is_some()) {
            count_against_capacity(list, &mut report);
        }
        // Overlaps and losses: compare each hold with every later grant that
        // began while it was believed / still held.
        for i in 0..list.len() {
            if list[i].share.is_some() {
                continue;
            }
            // With fencing tokens, a later grant event carrying a lower
            // token is an earlier grant in the store, recorded late by a
            // client that stalled after it: not a takeover of this hold.
            let fencing = report.fencing;
            let after = |later: &&Hold| {
                later.client != list[i].client && !(fencing && later.token < list[i].token)
            };
            let believed = list[i].believed_until.unwrap_or(u64::MAX);
            let overlapped = list[i + 1..]
                .iter()
                .take_while(|later| later.granted < believed)
                .any(|later| after(&later));
            if overlapped {
                report.overlaps_seen_by_clients += 1;
            }
            let gave_up = list[i].gave_up.unwrap_or(u64::MAX);
            let taken = list[i + 1..]
                .iter()
                .take_while(|later| later.granted < gave_up)
                .any(|later| after(&later));
            if taken {
                report.locks_lost += 1;
                if !list[i].noticed && !list[i].killed {
                    report.lost_unnoticed += 1;
                }
            }
        }
        // Token order against real time: a hold released (ok) before another
        // was requested must carry the smaller token.
        let mut by_release: Vec<(u64, u64)> = list
            .iter()
            .filter_map(|h| Some((h.released_ok?, h.token)))
            .collect();
        by_release.sort();
        let mut by_request: Vec<(u64, u64)> = list.iter().map(|h| (h.requested, h.token)).collect();
        by_request.sort();
        let (mut next, mut highest) = (0, None::<u64>);
        for (asked, token) in by_request {
            while next < by_release.len() && by_release[next].0 < asked {
                highest = highest.max(Some(by_release[next].1));
                next += 1;
            }
            if highest.is_some_and(|h| h >= token) {
                report.token_order_violations += 1;
            }
        }
    }
    for (lock, client, died) in deaths {
        let next = holds[&lock]
            .iter()
            .filter(|h| h.client != client && h.granted > died)
            .map(|h| h.granted)
            .min();
        if let Some(granted) = next {
            recoveries.push((granted - died) as f64 / 1e9);
        }
    }
    recoveries.sort_by(|a, b| a.total_cmp(b));
    report.recovery_p50_s = recoveries.get(recoveries.len() / 2).copied();
    report.recovery_max_s = recoveries.last().copied();
    report
}

/// Semaphores and read-write locks (holds sorted by grant): at each grant,
/// the holds still inside by their holders' account must leave room for
/// it. When they do not, the store must have taken at least the excess from
/// holders that noticed the loss (lost signal, refused release) or died;
/// otherwise the grant is a violation. Counts, per the fields' meaning:
/// over-capacity grants by belief as overlaps; the holds that had lost
/// their place at such a grant (and every hold inside a violating one) as
/// lost; the unnoticed ones of a violating grant as lost unnoticed.
fn count_against_capacity(list: &[Hold], report: &mut Report) {
    let weight = |h: &Hold| h.share.map_or(1, |(w, _)| w);
    let mut lost = vec![false; list.len()];
    let mut unnoticed = vec![false; list.len()];
    for (g, grant) in list.iter().enumerate() {
        let capacity = grant.share.map_or(1, |(_, c)| c);
        let at = grant.granted;
        let inside_until = |end: Option<u64>| end.is_none_or(|end| end > at);
        let believed: u64 = list[..g]
            .iter()
            .filter(|h| inside_until(h.believed_until))
            .map(weight)
            .sum();
        if believed + weight(grant) > capacity {
            report.overlaps_seen_by_clients += 1;
        }
        let inside: Vec<usize> = (0..g).filter(|&h| inside_until(list[h].gave_up)).collect();
        let used: u64 = inside.iter().map(|&h| weight(&list[h])).sum();
        if used + weight(grant) <= capacity {
            continue;
        }
        let excess = used + weight(grant) - capacity;
        let gone = |h: &Hold| h.noticed || h.killed;
        let covered: u64 = inside
            .iter()
            .map(|&h| &list[h])
            .filter(|h| gone(h))
            .map(weight)
            .sum();
        for &h in &inside {
            if gone(&list[h]) {
                lost[h] = true;
            } else if covered < excess {
                lost[h] = true;
                unnoticed[h] = true;
            }
        }
        if covered < excess {
            report.capacity_exceeded += 1;
        }
    }
    report.locks_lost += lost.iter().filter(|&&l| l).count() as u64;
    report.lost_unnoticed += unnoticed.iter().filter(|&&u| u).count() as u64;
}

fn end_by_death(
    holds: &mut HashMap<String, Vec<Hold>>,
    open: &mut HashMap<(u32, String), usize>,
    deaths: &mut Vec<(String, u32, u64)>,
    client: u32,
    t: u64,
    killed: bool,
) {
    let ended: Vec<(u32, String)> = open.keys().filter(|(c, _)| *c == client).cloned().collect();
    for key in ended {
        let i = open.remove(&key).expect("listed");
        let lock = key.1;
        let hold = &mut holds.get_mut(&lock).expect("open hold")[i];
        hold.believed_until.get_or_insert(t);
        hold.gave_up.get_or_insert(t);
        hold.killed |= killed;
        if killed {
            deaths.push((lock, client, t));
        }
    }
}

/// One markdown table row per report: the figures docs/reliability.md
/// publishes. `label` names the run (store and fault).
pub fn markdown_header() -> String {
    "| run | setup | acquisitions | stale writes accepted | stale writes refused | lost updates \
     | token order violations | locks lost (unnoticed) | lost signals | recovery p50 / max | left behind |\n\
     |---|---|---:|---:|---:|---:|---:|---:|---:|---|---:|"
        .to_string()
}

impl Report {
    /// This report as a row under [`markdown_header`].
    pub fn markdown_row(&self, label: &str) -> String {
        let fenced = |count: u64| {
            if self.fencing {
                count.to_string()
            } else {
                format!("({count})")
            }
        };
        let seconds = |s: Option<f64>| s.map_or("–".to_string(), |s| format!("{s:.2} s"));
        format!(
            "| {label} | {} | {} | {} | {} | {} | {} | {} ({}) | {} | {} / {} | {} |",
            self.setup,
            self.acquisitions,
            fenced(self.stale_writes_accepted),
            fenced(self.stale_writes_refused),
            self.lost_updates,
            fenced(self.token_order_violations),
            self.locks_lost,
            self.lost_unnoticed,
            self.lost_signals,
            seconds(self.recovery_p50_s),
            seconds(self.recovery_max_s),
            self.leftovers
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client(t: u64, client: u32, op: Op, phase: Phase) -> Event {
        let mut e = Event::now(Source::Client, op, phase)
            .client(client)
            .lock("a");
        e.t = t * 1_000_000_000;
        e
    }

    fn start() -> Event {
        let mut e = Event::now(Source::Harness, Op::Start, Phase::Ok).detail("test");
        e.t = 0;
        e.fencing = Some(true);
        e
    }

    fn grant(t: u64, c: u32, token: u64) -> Vec<Event> {
        vec![
            client(t, c, Op::Acquire, Phase::Invoke),
            client(t, c, Op::Acquire, Phase::Ok).token(token),
        ]
    }

    fn release(t: u64, c: u32) -> Vec<Event> {
        vec![
            client(t, c, Op::Release, Phase::Invoke),
            client(t, c, Op::Release, Phase::Ok),
        ]
    }

    fn serve(t: u64, token: u64, stale: bool, lost_update: bool, ok: bool) -> Event {
        let phase = if ok { Phase::Ok } else { Phase::Fail };
        let mut e = Event::now(Source::Register, Op::Serve, phase)
            .lock("a")
            .token(token)
            .detail("write");
        e.t = t * 1_000_000_000;
        e.stale = stale;
        e.lost_update = lost_update;
        e
    }

    #[test]
    fn a_clean_history_has_no_violations() {
        let history = [
            grant(1, 1, 10),
            release(2, 1),
            grant(3, 2, 11),
            release(4, 2),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.acquisitions, 2);
        assert_eq!(report.violations(), Vec::<String>::new());
        assert_eq!(report.overlaps_seen_by_clients, 0);
        assert_eq!(report.locks_lost, 0);
    }

    #[test]
    fn tokens_out_of_real_time_order_are_caught() {
        let history = [
            vec![start()],
            grant(1, 1, 10),
            release(2, 1),
            grant(3, 2, 9),
            release(4, 2),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.token_order_violations, 1);
        assert_eq!(report.violations().len(), 1);
        // Without fencing tokens the same history is no violation.
        let report = check(&history[1..]);
        assert_eq!(report.token_order_violations, 1);
        assert!(report.violations().is_empty());
    }

    #[test]
    fn a_lost_lock_its_holder_never_noticed_is_caught() {
        // Client 1 holds from 1 to 5; client 2 is granted at 3.
        let history = [
            grant(1, 1, 10),
            grant(3, 2, 11),
            release(4, 2),
            release(5, 1),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.overlaps_seen_by_clients, 1);
        assert_eq!(report.locks_lost, 1);
        assert_eq!(report.lost_unnoticed, 1);
        assert!(!report.violations().is_empty());
    }

    #[test]
    fn a_grant_recorded_late_is_no_takeover_where_tokens_order_grants() {
        // Client 2 was granted token 9 before client 1's 10, but stalled
        // before it recorded the grant (at 3, inside client 1's hold).
        let history = [
            vec![start()],
            grant(1, 1, 10),
            grant(3, 2, 9),
            release(4, 2),
            release(5, 1),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.locks_lost, 0);
        assert_eq!(report.lost_unnoticed, 0);
        // Without fencing tokens, nothing orders the grants but the events.
        let report = check(&history[1..]);
        assert_eq!(report.locks_lost, 1);
    }

    #[test]
    fn a_noticed_loss_is_counted_but_not_a_violation() {
        let mut history = [grant(1, 1, 10), grant(3, 2, 11), release(4, 2)].concat();
        history.push(client(2, 1, Op::Lost, Phase::Ok));
        history.push(client(5, 1, Op::Release, Phase::Invoke));
        history.push(client(5, 1, Op::Release, Phase::Fail));
        let report = check(&history);
        assert_eq!((report.locks_lost, report.lost_unnoticed), (1, 0));
        assert_eq!(report.lost_signals, 1);
        assert_eq!(report.overlaps_seen_by_clients, 0, "it gave up at 2");
        assert_eq!(report.violations(), Vec::<String>::new());
    }

    #[test]
    fn register_verdicts_are_counted() {
        let history = [
            start(),
            serve(1, 10, false, false, true),
            serve(2, 9, true, false, false),
            serve(3, 9, true, true, true),
        ];
        let report = check(&history);
        assert_eq!(report.writes_accepted, 2);
        assert_eq!(report.stale_writes_refused, 1);
        assert_eq!(report.stale_writes_accepted, 1);
        assert_eq!(report.lost_updates, 1);
        assert_eq!(report.violations().len(), 2);
    }

    #[test]
    fn recovery_runs_from_the_kill_to_the_next_grant() {
        let mut history = grant(1, 1, 10);
        let mut kill = Event::now(Source::Nemesis, Op::Kill, Phase::Invoke).client(1);
        kill.t = 2_000_000_000;
        history.push(kill);
        history.extend(grant(4, 2, 11));
        let report = check(&history);
        assert_eq!(report.kills, 1);
        assert_eq!(report.recovery_max_s, Some(2.0));
        assert_eq!(report.lost_unnoticed, 0, "a dead holder cannot notice");
    }

    /// A grant of a semaphore permit or read-write lock side.
    fn share(t: u64, c: u32, token: u64, weight: u64, capacity: u64) -> Vec<Event> {
        let mut events = grant(t, c, token);
        events[1].share = Some((weight, capacity));
        events
    }

    #[test]
    fn permits_within_the_count_are_no_violation() {
        let history = [
            share(1, 1, 10, 1, 2),
            share(2, 2, 11, 1, 2),
            release(3, 1),
            share(4, 3, 12, 1, 2),
            release(5, 2),
            release(6, 3),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.acquisitions, 3);
        assert_eq!(report.overlaps_seen_by_clients, 0, "two of two permits");
        assert_eq!(report.capacity_exceeded, 0);
        assert_eq!(report.violations(), Vec::<String>::new());
    }

    #[test]
    fn a_permit_beyond_the_count_is_caught_unless_a_holder_lost_its_own() {
        // Three holders of two permits at 3, none of them told.
        let history = [
            share(1, 1, 10, 1, 2),
            share(2, 2, 11, 1, 2),
            share(3, 3, 12, 1, 2),
            release(4, 1),
            release(5, 2),
            release(6, 3),
        ]
        .concat();
        let report = check(&history);
        assert_eq!(report.capacity_exceeded, 1);
        assert_eq!(report.lost_unnoticed, 2);
        assert_eq!(report.violations().len(), 2);
        // The same, but holder 1's lost signal fired: its permit was the
        // one the store gave away.
        let mut history = history;
        history.push(client(3, 1, Op::Lost, Phase::Ok));
        let report = check(&history);
        assert_eq!(report.capacity_exceeded, 0);
        assert_eq!((report.locks_lost, report.lost_unnoticed), (1, 0));
        assert_eq!(report.violations(), Vec::<String>::new());
    }

    #[test]
    fn readers_share_but_a_reader_beside_a_writer_is_caught() {
        const RW: u64 = 1 << 40;
        let readers = [
            share(1, 1, 10, 1, RW),
            share(2, 2, 11, 1, RW),
            release(3, 1),
            release(4, 2),
        ]
        .concat();
        assert_eq!(check(&readers).violations(), Vec::<String>::new());
        let beside = [
            share(1, 1, 10, RW, RW),
            share(2, 2, 11, 1, RW),
            release(3, 2),
            release(4, 1),
        ]
        .concat();
        assert_eq!(check(&beside).capacity_exceeded, 1);
        let after_readers = [
            share(1, 1, 10, 1, RW),
            share(2, 2, 11, 1, RW),
            release(3, 1),
            share(4, 3, 12, RW, RW),
            release(5, 2),
            release(6, 3),
        ]
        .concat();
        assert_eq!(
            check(&after_readers).capacity_exceeded,
            1,
            "a writer beside a reader"
        );
    }

    /// `lock_all`: one client holds two locks at once; each is checked on
    /// its own, and a kill ends both holds.
    #[test]
    fn a_client_holds_two_locks_at_once() {
        let on_b = |mut events: Vec<Event>| {
            for e in &mut events {
                e.lock = Some("b".into());
            }
            events
        };
        let mut history = [grant(1, 1, 10), on_b(grant(1, 1, 20))].concat();
        let mut kill = Event::now(Source::Nemesis, Op::Kill, Phase::Invoke).client(1);
        kill.t = 2_000_000_000;
        history.push(kill);
        history.extend(grant(4, 2, 11));
        history.extend(on_b(grant(5, 3, 21)));
        let report = check(&history);
        assert_eq!(report.acquisitions, 4);
        assert_eq!(report.violations(), Vec::<String>::new());
        assert_eq!(report.recovery_max_s, Some(3.0), "b was free again at 5");
        // Without the kill, client 1 still holds b when client 3 gets it.
        let history: Vec<Event> = history
            .into_iter()
            .filter(|e| e.src != Source::Nemesis)
            .collect();
        let report = check(&history);
        assert_eq!(report.lost_unnoticed, 2, "a and b were both taken from it");
    }
}
