//! The libraries a user would pick instead of omnilock on the same store,
//! used the way their own docs show, each from its own connections:
//!
//! - `redis://`: rslock 0.10 on that one server (`SET NX PX`, a scripted
//!   owner-checked delete, and a retry every 200 ms while the lock is busy);
//! - `redlock://`: rslock 0.10 on the same servers;
//! - `etcd://`: etcd's own Lock RPC (etcd-client 0.21) on a lease kept
//!   alive, released with the Unlock RPC.
//!
//! Other stores have no peer here. The SQL peer users would pick (the
//! `distributed-lock` crate) needs sqlx 0.8 beside omnilock's 0.9, so it
//! cannot be built into this binary.

use std::time::Duration;

use etcd_client::{Client, ConnectOptions, LockOptions};
use omnilock::raw::StoreUrl;
use omnilock::{Error, ErrorKind, Result};

/// A peer library connected to one store; see the [module](self) docs.
pub(crate) enum Peer {
    Rslock {
        manager: rslock::LockManager,
        servers: usize,
    },
    EtcdLockRpc {
        client: Box<Client>,
        lease: i64,
        keeper: tokio::task::JoinHandle<()>,
    },
}

/// A lock a peer holds, for its release.
pub(crate) enum PeerHold {
    Rslock(rslock::Lock),
    Etcd(Vec<u8>),
}

/// The TTL the rslock peer asks for: omnilock's default lease.
const TTL: Duration = Duration::from_secs(30);

impl Peer {
    /// The peer for the store `url` names, or `None` where there is none
    /// here (and for TLS URLs, which these clients are not set up for).
    pub(crate) async fn connect(url: &str) -> Result<Option<Peer>> {
        let parsed = StoreUrl::parse(url)?;
        let auth = parsed
            .password()
            .map(|pw| format!(":{}@", pw.expose()))
            .unwrap_or_default();
        let default_port = if parsed.scheme() == "etcd" {
            2379
        } else {
            6379
        };
        let hosts: Vec<(String, u16)> = parsed
            .hosts()
            .iter()
            .map(|h| (h.host.to_string(), h.port.unwrap_or(default_port)))
            .collect();
        match parsed.scheme() {
            "redis" | "redlock" => {
                let uris: Vec<String> = hosts
                    .iter()
                    .map(|(host, port)| format!("redis://{auth}{host}:{port}"))
                    .collect();
                let servers = uris.len();
                Ok(Some(Peer::Rslock {
                    manager: rslock::LockManager::new(uris),
                    servers,
                }))
            }
            "etcd" => {
                let endpoints: Vec<String> = hosts
                    .iter()
                    .map(|(host, port)| format!("http://{host}:{port}"))
                    .collect();
                let mut options = ConnectOptions::new()
                    .with_keep_alive(Duration::from_secs(5), Duration::from_secs(3))
                    .with_keep_alive_while_idle(true);
                if let (Some(user), Some(pw)) = (parsed.username(), parsed.password()) {
                    options = options.with_user(user, pw.expose());
                }
                let mut client = Client::connect(endpoints, Some(options))
                    .await
                    .map_err(etcd_error)?;
                let lease = client
                    .lease_grant(TTL.as_secs() as i64, None)
                    .await
                    .map_err(etcd_error)?
                    .id();
                let (mut keeper, mut stream) =
                    client.lease_keep_alive(lease).await.map_err(etcd_error)?;
                let keeper = tokio::spawn(async move {
                    loop {
                        tokio::time::sleep(TTL / 3).await;
                        if keeper.keep_alive().await.is_err() || stream.message().await.is_err() {
                            return;
                        }
                    }
                });
                Ok(Some(Peer::EtcdLockRpc {
                    client: Box::new(client),
                    lease,
                    keeper,
                }))
            }
            _ => Ok(None),
        }
    }

    /// What the peer is, for the table.
    pub(crate) fn label(&self) -> String {
        match self {
            Peer::Rslock { servers: 1, .. } => "rslock 0.10, one server".to_string(),
            Peer::Rslock { servers, .. } => format!("rslock 0.10, {servers} servers"),
            Peer::EtcdLockRpc { .. } => "etcd Lock RPC on a kept-alive lease".to_string(),
        }
    }

    /// Takes `name`, waiting for it as the peer does when it is held.
    pub(crate) async fn lock(&self, name: &str) -> Result<PeerHold> {
        match self {
            Peer::Rslock { manager, .. } => manager
                .acquire_no_guard(name.as_bytes(), TTL)
                .await
                .map(PeerHold::Rslock)
                .map_err(|e| Error::new(ErrorKind::Backend, format!("rslock: {e:?}"))),
            Peer::EtcdLockRpc { client, lease, .. } => {
                let held = client
                    .lock_client()
                    .lock(name, Some(LockOptions::new().with_lease(*lease)))
                    .await
                    .map_err(etcd_error)?;
                Ok(PeerHold::Etcd(held.key().to_vec()))
            }
        }
    }

    /// Releases what [`Peer::lock`] took.
    pub(crate) async fn unlock(&self, hold: PeerHold) -> Result<()> {
        match (self, hold) {
            (Peer::Rslock { manager, .. }, PeerHold::Rslock(lock)) => {
                manager.unlock(&lock).await;
                Ok(())
            }
            (Peer::EtcdLockRpc { client, .. }, PeerHold::Etcd(key)) => client
                .lock_client()
                .unlock(key)
                .await
                .map(drop)
                .map_err(etcd_error),
            _ => Err(Error::new(
                ErrorKind::Backend,
                "internal: a hold of another peer",
            )),
        }
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        if let Peer::EtcdLockRpc { keeper, .. } = self {
            keeper.abort();
        }
    }
}

fn etcd_error(err: etcd_client::Error) -> Error {
    Error::unavailable(format!("etcd peer: {err}"))
}

/// The `distributed-lock` crate, run as a process of its own (it needs
/// sqlx 0.8): `tools/peer-distributed-lock`, built with
/// `cargo build --release` in that directory and named by
/// `--peer-process`. Only for the stores it serves.
pub(crate) struct PeerProcess {
    pub(crate) program: std::path::PathBuf,
}

impl PeerProcess {
    /// Whether the crate has a provider for this URL's store.
    pub(crate) fn serves(url: &str) -> bool {
        StoreUrl::parse(url).is_ok_and(|u| {
            matches!(
                u.scheme(),
                "postgres" | "postgresql" | "mysql" | "mariadb" | "redis"
            )
        })
    }

    /// Runs `workload` ("uncontended" or "handoff") for `duration` and
    /// returns its row; a failure is a row that says why, not an error, so
    /// that omnilock's rows of the run are kept.
    pub(crate) async fn row(
        &self,
        workload: crate::run::Workload,
        url: &str,
        duration: Duration,
        hold: Duration,
    ) -> crate::run::Row {
        let clients = if workload == crate::run::Workload::Handoff {
            2
        } else {
            1
        };
        let mut row = crate::workloads::row(workload, clients, Vec::new(), duration, None);
        row.by = crate::run::By::Peer("distributed-lock 0.2 (a process of its own)".into());
        let run = tokio::process::Command::new(&self.program)
            .arg(workload.to_string())
            .arg(format!("{}ms", duration.as_millis()))
            .arg(format!("{}ms", hold.as_millis()))
            .env("PEER_URL", url)
            .kill_on_drop(true)
            .output();
        // The peer connects, runs for `duration` (a hand-off also holds),
        // and ends; one that hangs is killed (`kill_on_drop`).
        let limit = duration * 2 + hold + Duration::from_secs(60);
        let output = match tokio::time::timeout(limit, run).await {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => {
                row.note = format!("cannot run {}: {err}", self.program.display());
                return row;
            }
            Err(_) => {
                row.note = format!("the peer did not finish within {limit:?}; stopped");
                return row;
            }
        };
        // Its first line of complaint, without the password it was given.
        let complaint = || {
            let text = String::from_utf8_lossy(&output.stderr);
            let line = text.lines().next().unwrap_or("").trim().to_string();
            let line = match StoreUrl::parse(url)
                .ok()
                .and_then(|u| u.password().cloned())
            {
                Some(pw) if !pw.expose().is_empty() => line.replace(pw.expose(), "***"),
                _ => line,
            };
            if line.is_empty() {
                format!("the peer failed ({})", output.status)
            } else {
                line
            }
        };
        let parsed: Option<serde_json::Value> = serde_json::from_slice(&output.stdout).ok();
        let (Some(parsed), true) = (parsed, output.status.success()) else {
            row.note = complaint();
            return row;
        };
        let ms = |key: &str| {
            parsed[key]
                .as_f64()
                .and_then(|v| Duration::try_from_secs_f64(v / 1000.0).ok())
        };
        let (Some(p50), Some(p99), Some(p999), Some(ops)) = (
            ms("p50_ms"),
            ms("p99_ms"),
            ms("p999_ms"),
            parsed["ops"].as_u64(),
        ) else {
            row.note = "the peer's answer is not what it should be".to_string();
            return row;
        };
        row.ops = ops as usize;
        row.per_second = row.ops as f64 / duration.as_secs_f64().max(1e-9);
        (row.p50, row.p99, row.p999) = (p50, p99, p999);
        row
    }
}
