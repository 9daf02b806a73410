//! The Lua scripts and their typed calls. Each script runs atomically on
//! the server; together they are the whole lock protocol. Times come from
//! the server (`TIME`), never the client. All keys of one lock share the
//! hash tag `{prefix:name}` ([`keys`]).
//!
//! The scripts themselves are the files in `lua/`; each has one Rust
//! function here that puts its keys and arguments in the script's order and
//! decodes its answer into a reply type: [`mutex`] (one master's fair
//! queue), [`counted`] (semaphores and read-write locks), [`redlock`]
//! (Redlock's line of waiters on each node), [`inspect`] (the read-only
//! scripts of an operator's inspection) and [`records`] (a record's value
//! and time left, read together).
//!
//! A waiter entry is `<client id>:<waiter id>`; a release PUBLISHes the head
//! entry on `<channel prefix><client id>`, so exactly one waiter is woken.
//! The prefix is `<prefix>:wake:` (one channel per client) on one server,
//! and `{prefix:name}:wake:` in a cluster (one channel per lock and client,
//! in the lock's slot, published with `SPUBLISH`; the key prefix has no
//! braces, so a leading `{` tells the two apart).

pub(crate) mod counted;
pub(crate) mod guarded;
pub(crate) mod inspect;
pub(crate) mod keys;
pub(crate) mod mutex;
pub(crate) mod records;
pub(crate) mod redlock;

use redis::{Cmd, RedisError, Script};

use crate::config::WaitReplicas;

/// Shared Lua: the server's clock, dropping dead waiters from the head of
/// the queue, waking the live head, call ids that make a re-sent call
/// change nothing, and fencing tokens that never go below the server's
/// clock in microseconds.
const COMMON: &str = include_str!("lua/common.lua");

/// Shared Lua of the batched renewals: `renew_all(grant_of)`, where
/// `grant_of(lock)` answers the owner and token of the grant a lock key
/// holds (the key layouts of one server and of Redlock differ).
const RENEW_COMMON: &str = include_str!("lua/renew_common.lua");

/// Shared Lua of Redlock's line of waiters (see [`redlock`]).
const LINE_COMMON: &str = include_str!("lua/line_common.lua");

/// Shared Lua of semaphores and read-write locks (see [`counted`]).
const COUNTED_COMMON: &str = include_str!("lua/counted_common.lua");

/// The scripts, sent by their SHA (`EVALSHA`). A server that has lost them
/// (a restart, `SCRIPT FLUSH`) gets each loaded again (`SCRIPT LOAD`) by its
/// next use, in [`run`].
pub(crate) struct Scripts {
    acquire: Script,
    acquire_all: Script,
    release: Script,
    renew_all: Script,
    cancel: Script,
    break_lock: Script,
    guarded_write: Script,
    acquire_counted: Script,
    release_counted: Script,
    renew_counted: Script,
    cancel_counted: Script,
    redlock_acquire: Script,
    redlock_release: Script,
    redlock_cancel: Script,
    redlock_break: Script,
    redlock_renew_all: Script,
    inspect: Script,
    inspect_counted: Script,
    break_counted: Script,
    redlock_inspect: Script,
    read_record: Script,
}

impl Scripts {
    pub(crate) fn new() -> Self {
        let with_common = |body: &str| Script::new(&format!("{COMMON}\n{body}"));
        let line = |body: &str| Script::new(&format!("{COMMON}\n{LINE_COMMON}\n{body}"));
        let counted = |body: &str| Script::new(&format!("{COMMON}\n{COUNTED_COMMON}\n{body}"));
        Scripts {
            acquire: with_common(include_str!("lua/acquire.lua")),
            acquire_all: with_common(include_str!("lua/acquire_all.lua")),
            release: with_common(include_str!("lua/release.lua")),
            renew_all: Script::new(&format!(
                "{RENEW_COMMON}\n{}",
                include_str!("lua/renew_all.lua")
            )),
            cancel: with_common(include_str!("lua/cancel.lua")),
            break_lock: with_common(include_str!("lua/break.lua")),
            guarded_write: Script::new(include_str!("lua/guarded_write.lua")),
            acquire_counted: counted(include_str!("lua/acquire_counted.lua")),
            release_counted: counted(include_str!("lua/release_counted.lua")),
            renew_counted: counted(include_str!("lua/renew_counted.lua")),
            cancel_counted: counted(include_str!("lua/cancel_counted.lua")),
            redlock_acquire: line(include_str!("lua/redlock_acquire.lua")),
            redlock_release: line(include_str!("lua/redlock_release.lua")),
            redlock_cancel: line(include_str!("lua/redlock_cancel.lua")),
            redlock_break: line(include_str!("lua/redlock_break.lua")),
            redlock_renew_all: line(&format!(
                "{RENEW_COMMON}\n{}",
                include_str!("lua/redlock_renew_all.lua")
            )),
            inspect: Script::new(include_str!("lua/inspect.lua")),
            inspect_counted: Script::new(include_str!("lua/inspect_counted.lua")),
            break_counted: counted(include_str!("lua/break_counted.lua")),
            redlock_inspect: Script::new(include_str!("lua/redlock_inspect.lua")),
            read_record: Script::new(include_str!("lua/read_record.lua")),
        }
    }
}

/// An `EVALSHA` of `script` on `keys`, for the caller to add the arguments
/// to. One command with one buffer for all its arguments: redis-rs's
/// `ScriptInvocation` copies each key and argument into a buffer of its own
/// and then into the command, which on the uncontended path is most of the
/// client's allocations.
fn evalsha(script: &Script, keys: &[&str]) -> Cmd {
    let mut eval = redis::cmd("EVALSHA");
    eval.arg(script.get_hash()).arg(keys.len()).arg(keys);
    eval
}

/// Runs `eval` (from [`evalsha`]), loading `script` once more if the
/// server has lost it (a restart, `SCRIPT FLUSH`).
///
/// With `wait`, `WAIT` for `wait.replicas` runs right behind it, as one
/// pipeline on one connection: `WAIT` counts the writes of the connection it
/// runs on, so on any other (a reconnect in between, a different node's) it
/// would confirm at once what no replica has. Returns the script's answer
/// and, with `wait`, how many replicas acknowledged.
async fn run<T: redis::FromRedisValue>(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &Script,
    eval: Cmd,
    wait: Option<WaitReplicas>,
) -> redis::RedisResult<(T, Option<u32>)> {
    let no_script =
        |e: &RedisError| e.kind() == redis::ErrorKind::Server(redis::ServerErrorKind::NoScript);
    let Some(wait) = wait else {
        let answer = match eval.query_async::<T>(conn).await {
            Err(e) if no_script(&e) => {
                script.load_async(conn).await?;
                eval.query_async::<T>(conn).await?
            }
            answer => answer?,
        };
        return Ok((answer, None));
    };
    let mut confirm = redis::cmd("WAIT");
    confirm
        .arg(wait.replicas)
        .arg(wait.timeout.as_millis() as u64);
    let mut pipe = redis::pipe();
    pipe.add_command(eval).add_command(confirm);
    let answer = match pipe.query_async::<(T, i64)>(conn).await {
        Err(e) if no_script(&e) => {
            script.load_async(conn).await?;
            pipe.query_async::<(T, i64)>(conn).await?
        }
        answer => answer?,
    };
    Ok((answer.0, Some(answer.1.max(0) as u32)))
}

/// [`run`] without `WAIT`, for the script's answer alone.
async fn answer<T: redis::FromRedisValue>(
    conn: &mut impl redis::aio::ConnectionLike,
    script: &Script,
    eval: Cmd,
) -> redis::RedisResult<T> {
    run(conn, script, eval, None)
        .await
        .map(|(answer, _)| answer)
}

/// Milliseconds, as the scripts take durations.
fn ms(duration: std::time::Duration) -> u64 {
    duration.as_millis() as u64
}
