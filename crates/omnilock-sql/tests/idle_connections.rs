//! A store's pool gives back what a burst made it open: after load that
//! needed every connection of the pool (and, on MySQL/MariaDB, waiters
//! blocked on bells on connections of their own), the store is left with
//! at most `max_idle` idle pool connections and `max_idle` bell
//! connections, plus its one LISTEN (PostgreSQL) or ringer (MySQL/MariaDB)
//! connection, within two trimming periods (5 s each). sqlx alone keeps
//! every connection it ever opened while it is used now and then, since it
//! hands them out in turn.
//!
//! A test binary of its own: it counts this process's TCP connections to
//! the server, which other tests would share.

use std::collections::HashSet;
use std::time::{Duration, Instant};

use omnilock_core::{Locks, StoreUrl};
use omnilock_sql::{SqlConfig, SqlStore};
use omnilock_testkit::store_url;

async fn connect(url: &str) -> Locks {
    let config = SqlConfig::from_url(&StoreUrl::parse(url).expect("URL")).expect("config");
    Locks::new(SqlStore::connect(config).await.expect("connect"))
}

fn with_option(url: &str, option: &str) -> String {
    let sep = if url.contains('?') { '&' } else { '?' };
    format!("{url}{sep}{option}")
}

/// The port of the server in a `scheme://user:pass@host:port/db` URL.
fn port_of(url: &str) -> u16 {
    let rest = url.split_once("://").expect("scheme").1;
    let host_port = rest.rsplit_once('@').map_or(rest, |(_, after)| after);
    let host_port = host_port.split(['/', '?']).next().expect("host");
    host_port
        .rsplit_once(':')
        .and_then(|(_, port)| port.parse().ok())
        .expect("a URL with a port")
}

/// This process's established TCP connections to `port`: the sockets among
/// its descriptors, matched by inode in /proc/net/tcp and tcp6.
fn connections_to(port: u16) -> usize {
    let ours: HashSet<String> = std::fs::read_dir("/proc/self/fd")
        .expect("/proc/self/fd")
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_string(),
            )
        })
        .collect();
    let mut count = 0;
    for table in ["/proc/self/net/tcp", "/proc/self/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            let (Some(remote), Some(state), Some(inode)) =
                (fields.get(2), fields.get(3), fields.get(9))
            else {
                continue;
            };
            let remote_port = remote
                .rsplit_once(':')
                .and_then(|(_, hex)| u16::from_str_radix(hex, 16).ok());
            // 01: ESTABLISHED.
            if remote_port == Some(port) && *state == "01" && ours.contains(*inode) {
                count += 1;
            }
        }
    }
    count
}

/// A burst that needs many connections at once: 8 tasks contending for
/// one lock (on MySQL/MariaDB the waiters block on bells, each on a
/// connection of its own), then 8 tasks trying distinct locks as fast as
/// they can. Returns the most connections seen meanwhile.
async fn burst(locks: &Locks, port: u16) -> usize {
    let peak = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let watcher = tokio::spawn({
        let peak = peak.clone();
        async move {
            loop {
                peak.fetch_max(connections_to(port), std::sync::atomic::Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        }
    });
    let run = format!("idle/{}", std::process::id());
    let contended = (0..8).map(|_| {
        let (locks, name) = (locks.clone(), format!("{run}/one"));
        tokio::spawn(async move {
            for _ in 0..3 {
                let guard = locks.acquire(&name).await.expect("acquire");
                tokio::time::sleep(Duration::from_millis(30)).await;
                guard.release().await.expect("release");
            }
        })
    });
    for task in contended.collect::<Vec<_>>() {
        task.await.expect("task");
    }
    let until = Instant::now() + Duration::from_millis(800);
    let tries = (0..8).map(|i| {
        let (locks, name) = (locks.clone(), format!("{run}/{i}"));
        tokio::spawn(async move {
            while Instant::now() < until {
                if let Some(guard) = locks.try_acquire(&name).await.expect("try") {
                    guard.release().await.expect("release");
                }
            }
        })
    });
    for task in tries.collect::<Vec<_>>() {
        task.await.expect("task");
    }
    watcher.abort();
    peak.load(std::sync::atomic::Ordering::Relaxed)
}

async fn surplus_is_closed(store: &str, bound: usize) {
    let Some(url) = store_url(store) else {
        return;
    };
    let port = port_of(&url);
    let url = with_option(&url, "table=omnilock_idle&pool=8");
    let before = connections_to(port);
    let locks = connect(&url).await;
    let peak = burst(&locks, port).await - before;
    assert!(
        peak >= 6,
        "{store}: the burst opened only {peak} connections; it proves nothing"
    );
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut now = connections_to(port) - before;
    while now > bound {
        assert!(
            Instant::now() < deadline,
            "{store}: {now} connections left 20 s after a burst of {peak} (at most {bound} expected)"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
        now = connections_to(port) - before;
    }
    // The store works on after its surplus went.
    let guard = locks
        .acquire("idle/after")
        .await
        .expect("acquire after the trim");
    guard.release().await.expect("release");
    println!("{store}: {peak} connections at the burst's peak, {now} after");
}

#[tokio::test(flavor = "multi_thread")]
async fn postgres_surplus_idle_connections_are_closed() {
    // Two idle pool connections and the LISTEN connection.
    surplus_is_closed("POSTGRES", 3).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn mysql_surplus_idle_connections_are_closed() {
    // Two idle pool connections, two bell connections and the ringer.
    surplus_is_closed("MYSQL", 5).await;
}
