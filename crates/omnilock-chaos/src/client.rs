//! One contending client process: acquire → read the register → work for a
//! random while → write what it read plus one → release, until its standard
//! input closes. With a semaphore or a read-write lock the holders are many,
//! so the register (one value for one writer) stays out: acquire → work →
//! release, and the checker counts the holders against the capacity. With
//! `multi` it takes two locks at once through `lock_all` and uses the
//! register of each. Every step goes to standard output as a history line.

use std::io::Write;
use std::time::Duration;

use omnilock::{LockGuard, Locks};
use rand::Rng;
use rand::seq::{IteratorRandom, SliceRandom};
use tokio::io::AsyncReadExt;

use crate::documents::{DocumentWrite, Documents};
use crate::history::{Event, Op, Phase, Source};
use crate::logs::{LogWrite, Logs};
use crate::primitive::Primitive;
use crate::records::Records;
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
    /// Build the store on an application's own client or pool (`byo.rs`)
    /// instead of from the URL.
    pub byo: bool,
    /// The resource is a table in the lock's SQL database (`records.rs`):
    /// `Some(true)` written in guarded transactions.
    pub records: Option<bool>,
    /// The resource is a log in the lock's store (`logs.rs`), appended to
    /// this way, named after this run.
    pub log: Option<(LogWrite, String)>,
    /// The resource is a document per lock (`documents.rs`), written this
    /// way: files in the directory given, else rows in the lock's SQL
    /// database.
    pub document: Option<(DocumentWrite, Option<std::path::PathBuf>)>,
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
    let logs = match &config.log {
        Some(_) => Some(
            Logs::connect(&config.store)
                .await
                .map_err(|e| format!("client {id}: {e}"))?,
        ),
        None => None,
    };
    let locks = match logs.as_ref().and_then(Logs::locks) {
        Some(locks) => locks,
        None if config.byo => crate::byo::locks(&config.store, config.ttl)
            .await
            .map_err(|e| format!("client {id}: {e}"))?,
        None => omnilock::connect(&config.store)
            .await
            .map_err(|e| format!("client {id}: {e}"))?,
    };
    let mut register = Connection::open(&config.register)
        .await
        .map_err(|e| format!("client {id}: register: {e}"))?;
    let records = match config.records {
        Some(_) => Records::connect(&config.store)
            .await
            .map_err(|e| format!("client {id}: {e}"))?,
        None => None,
    };
    let documents = match &config.document {
        Some((_, dir)) => Some(
            Documents::connect(dir.as_deref(), &config.store)
                .await
                .map_err(|e| format!("client {id}: {e}"))?,
        ),
        None => None,
    };
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        let mut sink = [0u8; 64];
        let mut stdin = tokio::io::stdin();
        while stdin.read(&mut sink).await.is_ok_and(|n| n > 0) {}
        let _ = stop_tx.send(true);
    });
    while !*stop.borrow() {
        let resource = match (&records, &logs, &documents) {
            (Some(records), _, _) => Resource::Records(records),
            (None, Some(logs), _) => Resource::Logs(logs),
            (None, None, Some(documents)) => Resource::Documents(documents),
            (None, None, None) => Resource::Register(&mut register),
        };
        one_round(&locks, resource, &config).await;
    }
    locks.close().await;
    Ok(())
}

/// What a client writes under its locks.
enum Resource<'a> {
    Register(&'a mut Connection),
    Records(&'a Records),
    Logs(&'a Logs),
    Documents(&'a Documents),
}

/// One round: take the lock (or, with `multi`, two locks at once through
/// `lock_all`), use it, release it.
async fn one_round(locks: &Locks, resource: Resource<'_>, config: &ClientConfig) {
    let id = config.id;
    let mut rng = rand::thread_rng();
    let names: Vec<String> = if config.primitive == Primitive::Multi {
        // Two different locks, in a random order: lock_all must not
        // deadlock whatever order the callers name them in.
        let mut picked = (0..config.locks).choose_multiple(&mut rng, 2);
        picked.shuffle(&mut rng);
        picked.iter().map(|n| format!("chaos-{n}")).collect()
    } else {
        vec![format!("chaos-{}", rng.gen_range(0..config.locks))]
    };
    drop(rng);
    for name in &names {
        emit(client_event(id, Op::Acquire, Phase::Invoke, name));
    }
    let (acquired, share) = if config.primitive == Primitive::Multi {
        let names: Vec<&str> = names.iter().map(String::as_str).collect();
        let taken = locks
            .lock_all(&names)
            .ttl(config.ttl)
            .timeout(Duration::from_secs(20))
            .acquire()
            .await;
        (taken.map(omnilock::MultiGuard::into_guards), None)
    } else {
        let (request, share) = config.primitive.request(locks, &names[0]);
        let taken = request
            .ttl(config.ttl)
            .timeout(Duration::from_secs(20))
            .acquire()
            .await;
        (taken.map(|guard| vec![guard]), share)
    };
    let parts = match acquired {
        Ok(parts) => parts,
        Err(err) => {
            for name in &names {
                emit(client_event(id, Op::Acquire, Phase::Fail, name).detail(err.to_string()));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            return;
        }
    };
    let mut watchers = Vec::new();
    for part in &parts {
        let (lock, token) = (part.name().as_str().to_string(), part.token());
        let mut granted = client_event(id, Op::Acquire, Phase::Ok, &lock).token(token);
        granted.share = share;
        emit(granted);
        let lost = part.lost();
        watchers.push(tokio::spawn(async move {
            let err = lost.await;
            emit(
                client_event(id, Op::Lost, Phase::Ok, &lock)
                    .token(token)
                    .detail(err.kind().to_string()),
            );
        }));
    }

    if share.is_some() {
        let work = rand::thread_rng().gen_range(Duration::ZERO..=config.work);
        tokio::time::sleep(work).await;
    } else if let Resource::Register(register) = resource {
        use_register(register, config, &parts).await;
    } else {
        for part in &parts {
            if config.careful && !part.is_held() {
                emit(
                    client_event(id, Op::Skip, Phase::Ok, part.name().as_str()).token(part.token()),
                );
                continue;
            }
            let events = match (&resource, &config.records, &config.log) {
                (Resource::Records(records), Some(guarded), _) => {
                    records.update(id, part, *guarded, config.work).await
                }
                (Resource::Logs(logs), _, Some((how, run))) => {
                    logs.append(run, id, part, *how, config.work).await
                }
                (Resource::Documents(documents), _, _) => {
                    let how = config.document.as_ref().expect("a documents mode").0;
                    documents.rewrite(id, part, how, config.work).await
                }
                _ => unreachable!("a resource comes with its mode"),
            };
            for event in events {
                emit(event);
            }
        }
    }
    for part in parts {
        let lock = part.name().as_str().to_string();
        emit(client_event(id, Op::Release, Phase::Invoke, &lock).token(part.token()));
        let released = part.release().await;
        emit(match released {
            Ok(()) => client_event(id, Op::Release, Phase::Ok, &lock),
            Err(err) => client_event(id, Op::Release, Phase::Fail, &lock).detail(err.to_string()),
        });
    }
    for watcher in watchers {
        watcher.abort();
    }
}

/// Under mutexes: read the register of every part, work, write what was
/// read plus one.
async fn use_register(register: &mut Connection, config: &ClientConfig, parts: &[LockGuard]) {
    let id = config.id;
    let mut read = Vec::new();
    for part in parts {
        let (lock, token) = (part.name().as_str(), part.token());
        emit(client_event(id, Op::Read, Phase::Invoke, lock).token(token));
        match register.read(lock, token, id).await {
            Ok(Answer::Ok(value)) => {
                let value = value.unwrap_or(0);
                emit(client_event(id, Op::Read, Phase::Ok, lock).value(value));
                read.push((part, value));
            }
            Ok(Answer::Refused) => {
                emit(client_event(id, Op::Read, Phase::Fail, lock).detail("refused: stale token"));
            }
            Err(err) => {
                emit(client_event(id, Op::Read, Phase::Fail, lock).detail(err.to_string()));
            }
        }
    }
    if read.is_empty() {
        return;
    }
    let work = rand::thread_rng().gen_range(Duration::ZERO..=config.work);
    tokio::time::sleep(work).await;
    for (part, value) in read {
        let (lock, token) = (part.name().as_str(), part.token());
        if config.careful && !part.is_held() {
            emit(client_event(id, Op::Skip, Phase::Ok, lock).token(token));
            continue;
        }
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
