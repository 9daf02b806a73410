//! The faults of a soak: every so often one node of one store, the stores
//! taken in turn, is paused (SIGSTOP, then SIGCONT) or killed and started
//! again (`scripts/stores.sh restart`). Everything is put back on the way
//! out: a paused process is continued and a killed node restarted when its
//! guard drops, also when the soak ends early or panics.

use std::time::{Duration, Instant};

use omnilock_harness::faults::{PausedStore, kill_store_process, try_pause_store_process};
use omnilock_harness::topology::Topology;
use serde::Serialize;
use tokio::sync::watch;

use super::stores::{FaultNode, Store};

/// A fault of the soak.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum SoakFault {
    /// SIGSTOP the node's process (and its children: PostgreSQL's
    /// backends), SIGCONT after the fault's length.
    Pause,
    /// SIGKILL the node, start it again after the fault's length. A node
    /// the script cannot restart is paused instead.
    Restart,
}

/// One fault as it happened.
#[derive(Clone, Debug, Serialize)]
pub struct FaultRecord {
    /// Seconds since the clients started.
    pub at: f64,
    /// How long it took, restart included.
    pub took: f64,
    /// The store's label.
    pub store: String,
    /// The node (`<deployment>/<name>`).
    pub node: String,
    /// What was done.
    pub fault: SoakFault,
    /// `ok`, or what went wrong.
    pub outcome: String,
}

/// When and how the nemesis strikes.
#[derive(Clone, Debug)]
pub struct Schedule {
    /// Time between two faults (the first comes one interval in).
    pub every: Duration,
    /// How long a node stays paused or down.
    pub length: Duration,
    /// The kinds, in turn per store.
    pub faults: Vec<SoakFault>,
}

/// The node and fault of turn `turn` (0, 1, ...): the stores with nodes in
/// turn, and for each store its nodes and the kinds in turn.
pub fn plan(
    stores: &[Store],
    schedule: &Schedule,
    turn: usize,
) -> Option<(usize, FaultNode, SoakFault)> {
    let targets: Vec<usize> = (0..stores.len())
        .filter(|i| !stores[*i].nodes.is_empty())
        .collect();
    if targets.is_empty() || schedule.faults.is_empty() {
        return None;
    }
    let store = targets[turn % targets.len()];
    let round = turn / targets.len();
    let nodes = &stores[store].nodes;
    let node = nodes[round % nodes.len()].clone();
    let mut fault = schedule.faults[round % schedule.faults.len()];
    if fault == SoakFault::Restart && !node.restartable {
        fault = SoakFault::Pause;
    }
    Some((store, node, fault))
}

/// Injects faults from `started` until `end` or until `stop` turns true,
/// and returns what it did. A fault under way when told to stop is cut
/// short (the node put back at once).
pub async fn run(
    stores: Vec<Store>,
    schedule: Schedule,
    started: Instant,
    end: Instant,
    mut stop: watch::Receiver<bool>,
) -> Vec<FaultRecord> {
    let mut records = Vec::new();
    for turn in 0.. {
        let at = started + schedule.every * (turn as u32 + 1);
        let Some((store, node, fault)) = plan(&stores, &schedule, turn) else {
            break;
        };
        if at >= end || *stop.borrow() {
            break;
        }
        tokio::select! {
            _ = tokio::time::sleep_until(at.into()) => {}
            _ = stop.wait_for(|stop| *stop) => break,
        }
        let began = Instant::now();
        let outcome = match fault {
            SoakFault::Pause => pause(&node, schedule.length, &mut stop).await,
            SoakFault::Restart => restart(&node, schedule.length, &mut stop).await,
        };
        let record = FaultRecord {
            at: began.duration_since(started).as_secs_f64(),
            took: began.elapsed().as_secs_f64(),
            store: stores[store].label.clone(),
            node: format!("{}/{}", node.deployment, node.name),
            fault,
            outcome: outcome.err().unwrap_or_else(|| "ok".into()),
        };
        eprintln!(
            "soak: {:.0} s: {:?} {} ({}): {} in {:.1} s",
            record.at, record.fault, record.node, record.store, record.outcome, record.took
        );
        records.push(record);
    }
    records
}

/// Sleeps `length`, or less if told to stop.
async fn hold_for(length: Duration, stop: &mut watch::Receiver<bool>) {
    tokio::select! {
        _ = tokio::time::sleep(length) => {}
        _ = stop.wait_for(|stop| *stop) => {}
    }
}

/// The node's process now (the topology is read again: a restart changes it).
fn live_pid(node: &FaultNode) -> Result<u32, String> {
    let topology = Topology::load()?;
    let deployment = topology
        .get(&node.deployment)
        .ok_or_else(|| format!("no deployment {} in the topology", node.deployment))?;
    let found = deployment
        .nodes
        .iter()
        .find(|n| n.name == node.name)
        .ok_or_else(|| format!("no node {} in {}", node.name, node.deployment))?;
    found
        .live_pid()
        .ok_or_else(|| format!("{}/{} is not running", node.deployment, node.name))
}

/// The process `pid` and its children (PostgreSQL serves each connection
/// from a child of its postmaster).
fn with_children(pid: u32) -> Vec<u32> {
    let mut pids = vec![pid];
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return pids;
    };
    for entry in dir.flatten() {
        let Some(child) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
        // Fields after the command name: state, then the parent's id.
        let parent = stat
            .rsplit_once(')')
            .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok());
        if parent == Some(pid) {
            pids.push(child);
        }
    }
    pids
}

async fn pause(
    node: &FaultNode,
    length: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let pid = live_pid(node)?;
    // Each guard continues its process when dropped: at the end of this
    // function, or when the soak's task is dropped part-way.
    // A child may end between its listing and its SIGSTOP (a backend whose
    // connection was closed): it is skipped. The node itself must stop.
    let paused: Vec<PausedStore> = tokio::task::spawn_blocking(move || {
        let mut pids = with_children(pid).into_iter();
        let node = pids
            .next()
            .and_then(try_pause_store_process)
            .ok_or_else(|| format!("kill -STOP {pid} failed"))?;
        Ok::<_, String>(
            std::iter::once(node)
                .chain(pids.filter_map(try_pause_store_process))
                .collect(),
        )
    })
    .await
    .map_err(|e| format!("pausing {pid}: {e}"))??;
    hold_for(length, stop).await;
    drop(paused);
    Ok(())
}

async fn restart(
    node: &FaultNode,
    length: Duration,
    stop: &mut watch::Receiver<bool>,
) -> Result<(), String> {
    let pid = live_pid(node)?;
    let back = RestartOnDrop(Some(node.clone()));
    tokio::task::spawn_blocking(move || kill_store_process(pid))
        .await
        .map_err(|e| format!("killing {pid}: {e}"))?;
    hold_for(length, stop).await;
    tokio::task::spawn_blocking(move || back.restart())
        .await
        .map_err(|e| format!("restarting: {e}"))?
}

/// A killed node, started again when dropped unless
/// [`restart`](Self::restart) did it already.
struct RestartOnDrop(Option<FaultNode>);

impl RestartOnDrop {
    /// Starts the node again (`scripts/stores.sh restart`, which waits
    /// until it is ready).
    fn restart(mut self) -> Result<(), String> {
        let node = self.0.take().expect("restarted once");
        start_again(&node)
    }
}

fn start_again(node: &FaultNode) -> Result<(), String> {
    let topology = Topology::load()?;
    let deployment = topology
        .get(&node.deployment)
        .ok_or_else(|| format!("no deployment {}", node.deployment))?;
    let found = deployment
        .nodes
        .iter()
        .find(|n| n.name == node.name)
        .ok_or_else(|| format!("no node {} in {}", node.name, node.deployment))?;
    topology.restart(found)
}

impl Drop for RestartOnDrop {
    fn drop(&mut self) {
        if let Some(node) = self.0.take()
            && let Err(err) = start_again(&node)
        {
            eprintln!(
                "soak: could not start {}/{} again: {err}",
                node.deployment, node.name
            );
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(label: &str, nodes: &[(&str, bool)]) -> Store {
        Store {
            url: String::new(),
            label: label.into(),
            ports: Vec::new(),
            nodes: nodes
                .iter()
                .map(|(name, restartable)| FaultNode {
                    deployment: label.into(),
                    name: name.to_string(),
                    restartable: *restartable,
                })
                .collect(),
        }
    }

    #[test]
    fn faults_rotate_over_stores_nodes_and_kinds() {
        let stores = [
            store("etcd", &[("e1", true), ("e2", true), ("e3", true)]),
            store("mem", &[]),
            store("postgres", &[("0", false)]),
        ];
        let schedule = Schedule {
            every: Duration::from_secs(60),
            length: Duration::from_secs(3),
            faults: vec![SoakFault::Restart, SoakFault::Pause],
        };
        let turns: Vec<String> = (0..6)
            .map(|turn| {
                let (store, node, fault) = plan(&stores, &schedule, turn).unwrap();
                format!("{} {} {fault:?}", stores[store].label, node.name)
            })
            .collect();
        assert_eq!(
            turns,
            [
                "etcd e1 Restart",
                "postgres 0 Pause",
                "etcd e2 Pause",
                "postgres 0 Pause",
                "etcd e3 Restart",
                "postgres 0 Pause",
            ]
        );
        assert!(plan(&[store("mem", &[])], &schedule, 0).is_none());
    }
}
