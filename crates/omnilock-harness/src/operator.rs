//! The operator's commands across processes: `omnilock status`, `ls` and
//! `break` report and remove what separate `omnilock run` processes hold.
//! Run by the CLI crate's tests for every store.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::deadline::{RunBounded, WaitBounded};
use crate::process::{
    KillOnDrop, holding, lock_name, printing, signal, stderr_of, text, token_written, wait_for_line,
};

/// What the store under test is expected to answer.
#[derive(Debug, Clone, Copy)]
pub struct Offers {
    /// `status` reports holders (false: it refuses with exit 64).
    pub inspect: bool,
    /// `ls` lists held locks (false: it refuses with exit 64).
    pub list: bool,
    /// Semaphores and read-write locks.
    pub counted: bool,
}

/// A holder started with `omnilock run --owner OWNER <side> NAME`: it
/// writes its fencing token to `marker` once it holds, then sleeps.
fn hold(
    omnilock: &Path,
    url: &str,
    name: &str,
    owner: &str,
    side: &[&str],
    marker: &Path,
) -> Child {
    let mut args = vec![
        "run", "--store", url, "--ttl", "3s", "--wait", "60s", "--owner", owner,
    ];
    args.extend_from_slice(side);
    args.push(name);
    holding(omnilock, &args, marker)
}

fn omnilock_at(omnilock: &Path, url: &str, args: &[&str]) -> Output {
    Command::new(omnilock)
        .args(["--store", url])
        .args(args)
        .stdin(Stdio::null())
        .output_or_fail("run omnilock")
}

/// `omnilock status NAME --json [--kind KIND]`, parsed: the entry of `kind`.
fn status(omnilock: &Path, url: &str, name: &str, kind: &str) -> Value {
    let out = omnilock_at(omnilock, url, &["status", "--json", "--kind", kind, name]);
    assert_eq!(out.status.code(), Some(0), "status: {}", text(&out.stderr));
    let parsed: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("status --json is not JSON ({e}): {}", text(&out.stdout)));
    assert_eq!(parsed["name"], name, "{parsed}");
    let locks = parsed["locks"].as_array().expect("locks array");
    assert_eq!(locks.len(), 1, "one kind asked: {parsed}");
    assert_eq!(locks[0]["kind"], kind, "{parsed}");
    locks[0].clone()
}

/// The owners of a status entry's holders (or waiters), sorted.
fn owners(entry: &Value, field: &str) -> Vec<String> {
    let mut owners: Vec<String> = entry[field]
        .as_array()
        .map(|all| {
            all.iter()
                .filter_map(|h| h["owner"].as_str().map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    owners.sort();
    owners
}

/// Stops a holder as an operator would (SIGTERM to `omnilock`, which
/// passes it on and releases once its command has exited), and reaps it.
fn stop(child: &mut Child) {
    signal(child, "-TERM", false);
    child.wait_within("the told holder", Duration::from_secs(20));
}

/// The holder exits 70 (lock lost) soon after its hold was broken.
fn assert_told_of_break(child: &mut Child, who: &str) {
    let status = child.wait_within("the told holder", Duration::from_secs(20));
    let stderr = stderr_of(child);
    assert_eq!(
        status.code(),
        Some(70),
        "{who} must exit 70 after the break; stderr: {stderr}"
    );
}

/// How many waiters a status entry shows.
fn waiting(entry: &Value) -> usize {
    entry["waiters"].as_array().map_or(0, Vec::len)
}

/// A waiting `omnilock run` stopped by SIGTERM gives its place in line
/// back before it exits: `status` right after shows it no longer. (A
/// process that exited with its entry still queued would leave it there
/// for a lease, ahead of every later waiter.)
fn stopped_waiter_leaves_the_line(
    omnilock: &Path,
    url: &str,
    name: &str,
    dir: &Path,
    reaper: &mut KillOnDrop,
) {
    let marker = dir.join("operator-leaver");
    let mut leaver = hold(omnilock, url, name, "leaver@host-3", &[], &marker);
    reaper.watch(&leaver);
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let entry = status(omnilock, url, name, "mutex");
        if waiting(&entry) == 2 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the second waiting process never showed: {entry}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    stop(&mut leaver);
    let entry = status(omnilock, url, name, "mutex");
    assert!(
        waiting(&entry) == 1 && !owners(&entry, "waiters").contains(&"leaver@host-3".to_string()),
        "a waiter stopped by SIGTERM is still in line after it exited: {entry}"
    );
}

/// `status` shows the holder of a running `omnilock run` (its owner and
/// the token its command got) and the process waiting behind it; `ls`
/// lists the lock under its prefix; `break` frees it for the waiter and the
/// broken holder exits 70. With semaphores: both permit holders show, one
/// owner's permit is broken alone, and a `break` of the free mutex of the
/// same name says so and points at the semaphore.
pub fn operator_view_across_processes(omnilock: &Path, url: &str, dir: &Path, offers: Offers) {
    let name = lock_name("operator", dir);
    let mut reaper = KillOnDrop::default();
    let first_marker = dir.join("operator-first");
    let mut first = hold(omnilock, url, &name, "nightly@host-1", &[], &first_marker);
    reaper.watch(&first);
    let token = token_written(&first_marker, &mut first, "the first holder");

    let waiters_recorded = if offers.inspect {
        let entry = status(omnilock, url, &name, "mutex");
        assert_eq!(owners(&entry, "holders"), ["nightly@host-1"], "{entry}");
        assert_eq!(entry["holders"][0]["token"], token, "{entry}");
        assert_eq!(entry["holders"][0]["side"], "exclusive", "{entry}");
        if let Some(left) = entry["holders"][0]["lease_left_ms"].as_u64() {
            assert!(
                (1..=4_000).contains(&left),
                "a 3 s lease has {left} ms left"
            );
        }
        let shown = omnilock_at(omnilock, url, &["status", &name]);
        assert!(
            text(&shown.stdout).contains("nightly@host-1")
                && text(&shown.stdout).contains(&token.to_string()),
            "status names the holder and its token: {}",
            text(&shown.stdout)
        );
        !entry["waiters"].is_null()
    } else {
        let refused = omnilock_at(omnilock, url, &["status", &name]);
        assert_eq!(
            refused.status.code(),
            Some(64),
            "status where the store cannot inspect: {}",
            text(&refused.stderr)
        );
        false
    };

    let second_marker = dir.join("operator-second");
    let mut second = hold(omnilock, url, &name, "waiter@host-2", &[], &second_marker);
    reaper.watch(&second);
    if waiters_recorded {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let entry = status(omnilock, url, &name, "mutex");
            if owners(&entry, "waiters")
                .iter()
                .any(|o| o == "waiter@host-2")
                || entry["waiters"]
                    .as_array()
                    .is_some_and(|w| w.len() == 1 && w[0]["owner"].is_null())
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "the waiting process never showed: {entry}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    if waiters_recorded {
        stopped_waiter_leaves_the_line(omnilock, url, &name, dir, &mut reaper);
    }

    let prefix = name
        .rsplit_once('/')
        .map_or("", |(parent, _)| parent)
        .to_string()
        + "/";
    let listed = omnilock_at(omnilock, url, &["ls", "--json", &prefix]);
    if offers.list {
        assert_eq!(
            listed.status.code(),
            Some(0),
            "ls: {}",
            text(&listed.stderr)
        );
        let parsed: Value = serde_json::from_slice(&listed.stdout).expect("ls --json is JSON");
        let found = parsed["locks"]
            .as_array()
            .expect("locks")
            .iter()
            .any(|l| l["name"] == name.as_str() && l["kind"] == "mutex");
        assert!(found, "ls {prefix:?} must list {name:?}: {parsed}");
    } else {
        assert_eq!(
            listed.status.code(),
            Some(64),
            "ls where the store cannot list: {}",
            text(&listed.stderr)
        );
    }

    // `watch` prints the state now, then each change: the break below
    // hands the lock to the waiter.
    let watching = offers.inspect.then(|| {
        let args = [
            "--store",
            url,
            "watch",
            "--json",
            "--kind",
            "mutex",
            "--interval",
            "100ms",
            &name,
        ];
        let (watcher, lines) = printing(omnilock, &args, &mut reaper);
        wait_for_line(&lines, "the first holder", |state| {
            owners(&state["locks"][0], "holders") == ["nightly@host-1"] && state["at"].is_string()
        });
        (watcher, lines)
    });

    let broke = omnilock_at(omnilock, url, &["break", &name]);
    assert_eq!(
        broke.status.code(),
        Some(0),
        "break: {}",
        text(&broke.stderr)
    );
    assert!(
        text(&broke.stderr).contains("broke 1 hold"),
        "{}",
        text(&broke.stderr)
    );
    assert_told_of_break(&mut first, "the broken holder");
    let next = token_written(&second_marker, &mut second, "the waiter");
    if let Some((mut watcher, lines)) = watching {
        wait_for_line(&lines, "the waiter holding", |state| {
            owners(&state["locks"][0], "holders") == ["waiter@host-2"]
        });
        signal(&watcher, "-INT", false);
        let status = watcher.wait_within("watch", Duration::from_secs(10));
        assert_eq!(status.code(), Some(0), "watch ends cleanly on SIGINT");
    }
    assert!(next > token, "the waiter's token {next} after {token}");
    stop(&mut second);

    if !offers.counted {
        return;
    }
    let permit =
        |owner: &str, marker: &Path| hold(omnilock, url, &name, owner, &["--permits", "2"], marker);
    let (one, two) = (dir.join("operator-permit-1"), dir.join("operator-permit-2"));
    let mut holder_one = permit("permit@host-1", &one);
    let mut holder_two = permit("permit@host-2", &two);
    reaper.watch(&holder_one);
    reaper.watch(&holder_two);
    token_written(&one, &mut holder_one, "the first permit holder");
    token_written(&two, &mut holder_two, "the second permit holder");
    if offers.inspect {
        let entry = status(omnilock, url, &name, "semaphore");
        assert_eq!(entry["permits"], 2, "{entry}");
        assert_eq!(entry["free_permits"], 0, "{entry}");
        assert_eq!(
            owners(&entry, "holders"),
            ["permit@host-1", "permit@host-2"],
            "{entry}"
        );
    }

    let free_mutex = omnilock_at(omnilock, url, &["break", &name]);
    assert_eq!(
        free_mutex.status.code(),
        Some(0),
        "{}",
        text(&free_mutex.stderr)
    );
    let said = text(&free_mutex.stderr);
    assert!(
        said.contains("no holds") && (!offers.inspect || said.contains("--kind semaphore")),
        "a break of the free mutex points at the held semaphore: {said}"
    );

    let broke = omnilock_at(
        omnilock,
        url,
        &[
            "break",
            "--kind",
            "semaphore",
            "--owner",
            "permit@host-1",
            &name,
        ],
    );
    assert_eq!(broke.status.code(), Some(0), "{}", text(&broke.stderr));
    assert!(
        text(&broke.stderr).contains("broke 1 hold"),
        "{}",
        text(&broke.stderr)
    );
    assert_told_of_break(&mut holder_one, "the broken permit holder");
    assert!(
        holder_two.try_wait().expect("status").is_none(),
        "the other owner's permit holder must keep running"
    );
    if offers.inspect {
        let entry = status(omnilock, url, &name, "semaphore");
        assert_eq!(owners(&entry, "holders"), ["permit@host-2"], "{entry}");
    }
    stop(&mut holder_two);
}
