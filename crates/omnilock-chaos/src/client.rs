//! One contending client process: acquire → read the register → work for a
//! random while → write what it read plus one → release, until its standard
//! input closes. With a semaphore or a read-write lock the holders are many,
//! so the register (one value for one writer) stays out: acquire → work →
//! release, and the checker counts the holders against the capacity. Every
//! step goes to standard output as a history line.

use std::io::Write;
use std::time::Duration;

use omnilock::Locks;
use rand::Rng;
use tokio::io::AsyncReadExt;

use crate::history::{Event, Op, Phase, Source};
use crate::primitive::Primitive;
use crate::register::{Answer, Connection};

/// What a client is told by the harness.
pub struct ClientConfig {
    /// Its id in the history.
    pub id: u32,
    /// The store URL (possibly through the harness's proxies).
    pub store: String,
    /// The register's address.
    pub register: String,
    /// How many locks to pick from (`chaos-0` …).
    pub locks: u32,
    /// The TTL of each acquisition.
    pub ttl: Duration,
    /// The longest random work under the lock.
    pub work: Duration,
    /// Skip the write when the guard says the lock is gone. Off by default:
    /// a pause can fall between any check and the write, so the harness
    /// writes regardless and lets the register show what fencing saves.
    pub careful: bool,
    /// What it takes.
    pub primitive: Primitive,
}

fn emit(event: Event) {
    let mut out = std::io::stdout().lock();
    // The harness reads our stdout; if it is gone the run is over.
    if writeln!(out, "{}", event.to_line())
        .and_then(|_| out.flush())
        .is_err()
    {
        std::process::exit(0);
    }
}

fn client_event(id: u32, op: Op, phase: Phase, lock: &str) -> Event {
    Event::now(Source::Client, op, phase).client(id).lock(lock)
}

/// Runs the loop until standard input reaches its end.
pub async fn run(config: ClientConfig) -> Result<(), String> {
    let id = config.id;
    let locks = omnilock::connect(&config.store)
        .await
        .map_err(|e| format!("client {id}: {e}"))?;
    let mut register = Connection::open(&config.register)
        .await
        .map_err(|e| format!("client {id}: register: {e}"))?;
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut sink = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while stdin.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        let _ = stop_tx.send(true);
    });
    while !*stop.borrow() {
        let lock = format!("chaos-{}", rand::thread_rng().gen_range(0..config.locks));
        one_round(&locks, &mut register, &config, &lock).await;
    }
    locks.close().await;
    Ok(())
}

async fn one_round(locks: &Locks, register: &mut Connection, config: &ClientConfig, lock: &str) {
    let id = config.id;
    emit(client_event(id, Op::Acquire, Phase::Invoke, lock));
    let (request, share) = config.primitive.request(locks, lock);
    let acquired = request
        .ttl(config.ttl)
        .timeout(Duration::from_secs(20))
        .acquire()
        .await;
    let guard = match acquired {
        Ok(guard) => guard,
        Err(err) => {
            emit(client_event(id, Op::Acquire, Phase::Fail, lock).detail(err.to_string()));
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
    };
    let token = guard.token();
    let mut granted = client_event(id, Op::Acquire, Phase::Ok, lock).token(token);
    granted.share = share;
    emit(granted);
    let lost = guard.lost();
    let watcher = {
        let lock = lock.to_string();
        tokio::spawn(async move {
            let err = lost.await;
            emit(
                client_event(id, Op::Lost, Phase::Ok, &lock)
                    .token(token)
                    .detail(err.kind().to_string()),
            );
        })
    };

    if share.is_some() {
        let work = rand::thread_rng().gen_range(Duration::ZERO..=config.work);
        tokio::time::sleep(work).await;
    } else {
        use_register(register, config, lock, &guard).await;
    }
    emit(client_event(id, Op::Release, Phase::Invoke, lock).token(token));
    let released = guard.release().await;
    watcher.abort();
    emit(match released {
        Ok(()) => client_event(id, Op::Release, Phase::Ok, lock),
        Err(err) => client_event(id, Op::Release, Phase::Fail, lock).detail(err.to_string()),
    });
}

/// Under the mutex: read the register, work, write what was read plus one.
async fn use_register(
    register: &mut Connection,
    config: &ClientConfig,
    lock: &str,
    guard: &omnilock::LockGuard,
) {
    let (id, token) = (config.id, guard.token());
    emit(client_event(id, Op::Read, Phase::Invoke, lock).token(token));
    let value = match register.read(lock, token, id).await {
        Ok(Answer::Ok(value)) => {
            let value = value.unwrap_or(0);
            emit(client_event(id, Op::Read, Phase::Ok, lock).value(value));
            Some(value)
        }
        Ok(Answer::Refused) => {
            emit(client_event(id, Op::Read, Phase::Fail, lock).detail("refused: stale token"));
            None
        }
        Err(err) => {
            emit(client_event(id, Op::Read, Phase::Fail, lock).detail(err.to_string()));
            None
        }
    };
    if let Some(value) = value {
        let work = rand::thread_rng().gen_range(Duration::ZERO..=config.work);
        tokio::time::sleep(work).await;
        if config.careful && !guard.is_held() {
            emit(client_event(id, Op::Skip, Phase::Ok, lock).token(token));
        } else {
            emit(
                client_event(id, Op::Write, Phase::Invoke, lock)
                    .token(token)
                    .value(value + 1),
            );
            let event = match register.write(lock, token, id, value, value + 1).await {
                Ok(Answer::Ok(_)) => client_event(id, Op::Write, Phase::Ok, lock),
                Ok(Answer::Refused) => {
                    client_event(id, Op::Write, Phase::Fail, lock).detail("refused: stale token")
                }
                Err(err) => client_event(id, Op::Write, Phase::Fail, lock).detail(err.to_string()),
            };
            emit(event);
        }
    }
}
