//! `peer-distributed-lock`: the `distributed-lock` crate's acquire + release
//! of one lock name, again and again on one connection (`uncontended`), or
//! two providers handing one lock back and forth after a hold (`handoff`,
//! timed from the holder's release call to the waiter's grant). Prints one
//! JSON object: `{"label", "ops", "p50_ms", "p99_ms", "p999_ms"}`. The store URL comes
//! in the environment (`PEER_URL`), so that its password is not in the
//! process list.
//!
//! ```sh
//! PEER_URL=postgres://user:pw@127.0.0.1:5432/db peer-distributed-lock uncontended 4s
//! PEER_URL=redis://127.0.0.1:6379 peer-distributed-lock handoff 4s 250ms
//! ```

use std::time::{Duration, Instant};

use distributed_lock_core::{DistributedLock, LockHandle, LockProvider};
use distributed_lock_mysql::MySqlLockProvider;
use distributed_lock_postgres::PostgresLockProvider;
use distributed_lock_redis::RedisLockProvider;

/// One provider of the crate, for the store the URL names.
enum Provider {
    Postgres(PostgresLockProvider),
    MySql(MySqlLockProvider),
    Redis(RedisLockProvider),
}

/// A held lock of any provider.
enum Held {
    Postgres(<<PostgresLockProvider as LockProvider>::Lock as DistributedLock>::Handle),
    MySql(<<MySqlLockProvider as LockProvider>::Lock as DistributedLock>::Handle),
    Redis(<<RedisLockProvider as LockProvider>::Lock as DistributedLock>::Handle),
}

type Failure = Box<dyn std::error::Error + Send + Sync>;

impl Provider {
    async fn connect(url: &str) -> Result<Provider, Failure> {
        let scheme = url.split("://").next().unwrap_or_default();
        Ok(match scheme {
            "postgres" | "postgresql" => Provider::Postgres(
                PostgresLockProvider::builder()
                    .connection_string(url)
                    .build()
                    .await?,
            ),
            "mysql" | "mariadb" => Provider::MySql(
                MySqlLockProvider::builder()
                    .connection_string(url.replacen("mariadb://", "mysql://", 1))
                    .build()
                    .await?,
            ),
            "redis" => Provider::Redis(RedisLockProvider::builder().url(url).build().await?),
            other => return Err(format!("no distributed-lock provider for {other}://").into()),
        })
    }

    /// Waits up to a minute. (`acquire(None)` is no help: on MariaDB it
    /// asks `GET_LOCK` for a negative timeout and fails to decode the NULL
    /// answer, and on Redis it gives up at once when the lock is busy.)
    async fn lock(&self, name: &str) -> Result<Held, Failure> {
        let wait = Some(Duration::from_secs(60));
        Ok(match self {
            Provider::Postgres(p) => Held::Postgres(p.create_lock(name).acquire(wait).await?),
            Provider::MySql(p) => Held::MySql(p.create_lock(name).acquire(wait).await?),
            Provider::Redis(p) => Held::Redis(p.create_lock(name).acquire(wait).await?),
        })
    }
}

impl Held {
    async fn release(self) -> Result<(), Failure> {
        match self {
            Held::Postgres(h) => h.release().await?,
            Held::MySql(h) => h.release().await?,
            Held::Redis(h) => h.release().await?,
        }
        Ok(())
    }
}

fn duration(text: &str) -> Result<Duration, Failure> {
    let (number, unit) = text.split_at(
        text.find(|c: char| !c.is_ascii_digit())
            .unwrap_or(text.len()),
    );
    let n: u64 = number.parse()?;
    if n == 0 {
        return Err(format!("bad duration {text}: it must be longer than 0").into());
    }
    match unit {
        "ms" => Ok(Duration::from_millis(n)),
        "s" | "" => Ok(Duration::from_secs(n)),
        _ => Err(format!("bad duration {text}: use 250ms or 4s").into()),
    }
}

async fn uncontended(url: &str, name: &str, run_for: Duration) -> Result<Vec<Duration>, Failure> {
    let provider = Provider::connect(url).await?;
    for _ in 0..50 {
        provider.lock(name).await?.release().await?;
    }
    let started = Instant::now();
    let mut samples = Vec::new();
    while started.elapsed() < run_for {
        let at = Instant::now();
        provider.lock(name).await?.release().await?;
        samples.push(at.elapsed());
    }
    Ok(samples)
}

async fn handoff(
    url: &str,
    name: &str,
    run_for: Duration,
    hold: Duration,
) -> Result<Vec<Duration>, Failure> {
    let clients = [
        std::sync::Arc::new(Provider::connect(url).await?),
        std::sync::Arc::new(Provider::connect(url).await?),
    ];
    let started = Instant::now();
    let mut samples = Vec::new();
    let mut held = clients[0].lock(name).await?;
    let mut holder = 0;
    while samples.is_empty() || started.elapsed() < run_for {
        let (waiter, name_owned) = (clients[1 - holder].clone(), name.to_string());
        let waiting = tokio::spawn(async move {
            let held = waiter.lock(&name_owned).await?;
            Ok::<_, Failure>((held, Instant::now()))
        });
        tokio::time::sleep(hold).await;
        let released = Instant::now();
        held.release().await?;
        let (next, granted) = waiting.await??;
        samples.push(granted - released);
        held = next;
        holder = 1 - holder;
    }
    held.release().await?;
    Ok(samples)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let result = async {
        let (workload, run_for) = match &args[..] {
            [w, d, ..] => (w.as_str(), duration(d)?),
            _ => {
                return Err::<_, Failure>(
                    "usage: PEER_URL=URL peer-distributed-lock uncontended|handoff DURATION [HOLD]"
                        .into(),
                );
            }
        };
        let url = std::env::var("PEER_URL").map_err(|_| "set PEER_URL to the store's URL")?;
        let url = url.as_str();
        let name = format!("omnilock-bench-peer-{}", std::process::id());
        let mut samples = match workload {
            "uncontended" => uncontended(url, &name, run_for).await?,
            "handoff" => {
                let hold = duration(args.get(2).map_or("250ms", String::as_str))?;
                handoff(url, &name, run_for, hold).await?
            }
            other => return Err(format!("unknown workload {other}").into()),
        };
        if samples.is_empty() {
            return Err("no acquisition completed in the time given".into());
        }
        samples.sort();
        let at = |p: f64| samples[((samples.len() - 1) as f64 * p).round() as usize];
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        Ok(serde_json::json!({
            "label": "distributed-lock 0.2 (a process of its own)",
            "ops": samples.len(),
            "p50_ms": ms(at(0.5)),
            "p99_ms": ms(at(0.99)),
            "p999_ms": ms(at(0.999)),
        }))
    }
    .await;
    match result {
        Ok(json) => {
            println!("{json}");
            std::process::ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("peer-distributed-lock: {err}");
            std::process::ExitCode::from(1)
        }
    }
}
