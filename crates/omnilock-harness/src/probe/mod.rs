//! Store probes: what a store has served, counted by the store itself, and
//! one round of the raw operations omnilock's algorithm on that store needs
//! at the least (the *floor*), made with a bare client and nothing of
//! omnilock's. A benchmark shows omnilock's latency as a ratio to that floor
//! measured in the same run; the herd tests divide the count by hand-offs.
//!
//! A probe opens its own connections from the store URL omnilock takes
//! (omnilock's own options in the query string are ignored). It speaks plain
//! TCP only: a TLS URL gives an [`ErrorKind::Unsupported`] error.
//!
//! ```no_run
//! # async fn demo() -> omnilock_core::Result<()> {
//! use omnilock_harness::Probe;
//!
//! let probe = Probe::connect("redis://127.0.0.1:6379").await?.expect("a Redis probe");
//! let before = probe.requests_served().await?;
//! probe.floor_round().await?;
//! assert!(probe.requests_served().await? > before);
//! # Ok(()) }
//! ```

mod etcd;
mod redis;
mod sql;
mod zookeeper;

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use omnilock_core::{Error, ErrorKind, Result, StoreUrl};
use tokio::sync::OnceCell;

/// A probe of one store; see the [module](self) docs.
pub struct Probe {
    store: Store,
}

enum Store {
    Redis(redis::RedisProbe),
    Etcd(Box<etcd::EtcdProbe>),
    ZooKeeper(zookeeper::ZkProbe),
    Sql(sql::SqlProbe),
}

impl Probe {
    /// Opens a probe of the store `url` names. `Ok(None)` for the in-memory
    /// store, which has no floor and no counter; an error for a URL the
    /// probes cannot serve (TLS, an unknown scheme) or a store they cannot
    /// reach.
    pub async fn connect(url: &str) -> Result<Option<Probe>> {
        let url = StoreUrl::parse(url)?;
        let store = match url.scheme() {
            "mem" => return Ok(None),
            "redis" | "redis+cluster" | "redis+sentinel" | "redlock" => {
                Store::Redis(redis::RedisProbe::connect(&url).await?)
            }
            "etcd" => Store::Etcd(Box::new(etcd::EtcdProbe::connect(&url).await?)),
            "zk" | "zookeeper" => Store::ZooKeeper(zookeeper::ZkProbe::connect(&url).await?),
            "mysql" | "mariadb" | "postgres" | "postgresql" | "sqlite" => {
                Store::Sql(sql::SqlProbe::connect(&url).await?)
            }
            "etcds" | "zks" | "rediss" | "rediss+cluster" | "rediss+sentinel" => {
                return Err(Error::new(
                    ErrorKind::Unsupported,
                    format!(
                        "{}:// : store probes connect in plain text only",
                        url.scheme()
                    ),
                ));
            }
            other => return Err(Error::config(format!("no store probe for {other}://"))),
        };
        Ok(Some(Probe { store }))
    }

    /// How many requests the store has served so far, from its own counters
    /// (etcd's `/metrics`, ZooKeeper's `mntr`, Redis `INFO commandstats`,
    /// MySQL's `Questions`), lease keep-alives and the probe's own reads
    /// excepted where the counter allows. Comparable only between two reads.
    /// [`ErrorKind::Unsupported`] where the store has no such counter
    /// (PostgreSQL, SQLite).
    pub async fn requests_served(&self) -> Result<u64> {
        match &self.store {
            Store::Redis(p) => p.requests_served().await,
            Store::Etcd(p) => p.requests_served().await,
            Store::ZooKeeper(p) => p.requests_served().await,
            Store::Sql(p) => p.requests_served().await,
        }
    }

    /// Like [`Probe::requests_served`], but counting what clients sent: on
    /// Redis a script is one request, whatever commands it runs inside. The
    /// same count on stores that have no such distinction.
    pub async fn round_trips_served(&self) -> Result<u64> {
        match &self.store {
            Store::Redis(p) => p.round_trips_served().await,
            _ => self.requests_served().await,
        }
    }

    /// What one floor round does, for a report (e.g. "SET NX PX + EVALSHA
    /// owner-checked DEL").
    pub fn floor_ops(&self) -> &'static str {
        match &self.store {
            Store::Redis(p) => p.floor_ops(),
            Store::Etcd(_) => etcd::FLOOR_OPS,
            Store::ZooKeeper(_) => zookeeper::FLOOR_OPS,
            Store::Sql(_) => sql::FLOOR_OPS,
        }
    }

    /// Runs one floor round on a key of the probe's own, outside every
    /// lock's key space.
    pub async fn floor_round(&self) -> Result<()> {
        match &self.store {
            Store::Redis(p) => p.floor_round().await,
            Store::Etcd(p) => p.floor_round().await,
            Store::ZooKeeper(p) => p.floor_round().await,
            Store::Sql(p) => p.floor_round().await,
        }
    }
}

/// A unique-enough key suffix for one floor round.
fn random_suffix() -> String {
    format!("{:016x}", rand::random::<u64>())
}

/// A counter that the store has no way to give.
fn no_counter(what: &str) -> Error {
    Error::new(
        ErrorKind::Unsupported,
        format!("no request counter for {what}"),
    )
}

/// `host:port` of each host in `url`, with `default_port` where none is given.
fn addresses(url: &StoreUrl, default_port: u16) -> Vec<String> {
    url.hosts()
        .iter()
        .map(|h| {
            let host = if h.host.contains(':') {
                format!("[{}]", h.host)
            } else {
                h.host.clone()
            };
            format!("{host}:{}", h.port.unwrap_or(default_port))
        })
        .collect()
}

/// One line of text asked over a plain TCP connection (ZooKeeper's
/// four-letter words, an HTTP/1.0 GET), read to the end.
async fn ask(address: &str, request: &[u8]) -> Result<String> {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let talk = async {
        let mut stream = tokio::net::TcpStream::connect(address).await?;
        stream.write_all(request).await?;
        let mut answer = String::new();
        stream.read_to_string(&mut answer).await?;
        std::io::Result::Ok(answer)
    };
    match tokio::time::timeout(std::time::Duration::from_secs(5), talk).await {
        Ok(Ok(answer)) => Ok(answer),
        Ok(Err(e)) => Err(Error::unavailable(format!("{address}: {e}"))),
        Err(_) => Err(Error::unavailable(format!("{address}: no answer in 5 s"))),
    }
}

impl Probe {
    /// A request counter for a test subject (see `omnilock_testkit::Subject::
    /// with_request_counter`): each call reads [`Probe::requests_served`]
    /// from a probe of `url`, connected at the first call and kept.
    pub fn counter(url: impl Into<String>) -> impl Fn() -> CountFuture + Send + Sync + 'static {
        let url: Arc<str> = url.into().into();
        let probe: Arc<OnceCell<Probe>> = Arc::default();
        move || {
            let (url, probe) = (url.clone(), probe.clone());
            Box::pin(async move {
                let probe = probe
                    .get_or_try_init(|| async {
                        Probe::connect(&url)
                            .await?
                            .ok_or_else(|| no_counter("the in-memory store"))
                    })
                    .await?;
                probe.requests_served().await
            })
        }
    }
}

/// What [`Probe::counter`]'s calls return.
pub type CountFuture = Pin<Box<dyn Future<Output = Result<u64>> + Send>>;
