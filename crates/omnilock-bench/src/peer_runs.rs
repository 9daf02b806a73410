//! The peer libraries' own runs of the workloads that compare clients on
//! their own connections (contended-apart, handoff), measured the way
//! [`crate::workloads`] measures omnilock's. (`uncontended` interleaves
//! the peer in its own batches.)

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::peers::Peer;
use crate::run::{By, Row, Workload};
use crate::workloads::{Tally, join, row};

/// The peer library's [`crate::workloads::contended_apart`]: `clients` clients of the peer,
/// each with its own connections, take one lock in turn; `None` when the
/// store has no in-process peer.
pub(crate) async fn peer_contended_apart(
    url: &str,
    name: &str,
    clients: usize,
    duration: Duration,
) -> omnilock::Result<Option<Row>> {
    let mut peers = Vec::with_capacity(clients);
    for _ in 0..clients {
        match Peer::connect(url).await? {
            Some(peer) => peers.push(Arc::new(peer)),
            None => return Ok(None),
        }
    }
    let label = peers[0].label();
    let name = format!("{name}/peer");
    let tally = Tally::new(clients);
    let started = Instant::now();
    let deadline = tokio::time::Instant::from_std(started + duration);
    let mut tasks = Vec::new();
    for (client, peer) in peers.iter().enumerate() {
        let (peer, name, tally) = (peer.clone(), name.clone(), tally.clone());
        tasks.push(tokio::spawn(async move {
            while started.elapsed() < duration {
                let at = Instant::now();
                let Ok(held) = tokio::time::timeout_at(deadline, peer.lock(&name)).await else {
                    break;
                };
                let held = held?;
                tally.granted(client, at.elapsed());
                peer.unlock(held).await?;
            }
            Ok::<_, omnilock::Error>(())
        }));
    }
    join(tasks).await?;
    let mut row = tally.row(Workload::ContendedApart, clients, started.elapsed());
    row.by = By::Peer(label);
    Ok(Some(row))
}

/// The peer's hand-off, timed as [`crate::workloads::handoff`] times omnilock's: two clients
/// of the peer library, each with its own connections.
pub(crate) async fn peer_handoff(
    url: &str,
    name: &str,
    hold: Duration,
    duration: Duration,
) -> omnilock::Result<Option<Row>> {
    let (Some(first), Some(second)) = (Peer::connect(url).await?, Peer::connect(url).await?) else {
        return Ok(None);
    };
    let label = first.label();
    let clients = [Arc::new(first), Arc::new(second)];
    let name = format!("{name}/peer");
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut held = clients[0].lock(&name).await?;
    let mut holder = 0;
    while samples.is_empty() || started.elapsed() < duration {
        let (peer, name_owned) = (clients[1 - holder].clone(), name.clone());
        let waiting = tokio::spawn(async move {
            let hold = peer.lock(&name_owned).await?;
            Ok::<_, omnilock::Error>((hold, Instant::now()))
        });
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        clients[holder].unlock(held).await?;
        let (next, granted) = waiting
            .await
            .map_err(|e| omnilock::Error::new(omnilock::ErrorKind::Backend, e.to_string()))??;
        samples.push(granted - released);
        held = next;
        holder = 1 - holder;
    }
    let elapsed = started.elapsed();
    clients[holder].unlock(held).await?;
    let mut row = row(Workload::Handoff, 2, samples, elapsed, None);
    row.by = By::Peer(label);
    Ok(Some(row))
}
