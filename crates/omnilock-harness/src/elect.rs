//! `omnilock elect` across processes: one leader runs its command, the
//! next candidate takes over when it steps down, a listener sees each
//! leader, and a leader whose leadership is taken away stops its command
//! and exits 70. Run by the CLI crate's tests for every store.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::Duration;

use crate::deadline::{RunBounded, WaitBounded};
use crate::process::{
    KillOnDrop, holding, lock_name, printing, signal, stderr_of, text, token_written, wait_for_line,
};

/// A candidate campaigning as `value`, whose command writes its term to
/// A candidate campaigning as `value`, whose command writes its term to
/// `marker` once elected, then sleeps.
fn candidate(omnilock: &Path, url: &str, name: &str, value: &str, marker: &Path) -> Child {
    holding(
        omnilock,
        &["elect", "--store", url, "--ttl", "3s", name, value],
        marker,
    )
}

/// Waits until the listener prints `leader` leading.
fn wait_for_leader(lines: &mpsc::Receiver<String>, leader: &str) {
    wait_for_line(lines, &format!("{leader:?} leading"), |parsed| {
        parsed["leader"] == leader && parsed["term"].as_u64().is_some()
    });
}

/// Two candidates and a listener: the first leads while the second waits;
/// SIGTERM to the first makes its command end and omnilock resign (exit
/// 143 as the command's own status), and the second leads with a higher
/// term; breaking the election's lock stops the second's command and it
/// exits 70. The listener prints each leader and exits 0 on SIGINT. On a
/// store that cannot say who leads (`listens` false: Redlock, etcd's
/// Lock RPC), `--listen` exits 64 and the candidates still take turns.
pub fn elect_across_processes(omnilock: &Path, url: &str, dir: &Path, listens: bool) {
    let name = lock_name("elect", dir);
    let (first_marker, second_marker) = (dir.join("elect-first"), dir.join("elect-second"));
    let mut reaper = KillOnDrop::default();
    if !listens {
        let out = Command::new(omnilock)
            .args(["elect", "--store", url, "--listen", &name])
            .stdin(Stdio::null())
            .output_or_fail("run the listener");
        assert_eq!(
            out.status.code(),
            Some(64),
            "--listen where the store cannot say who leads: {}",
            text(&out.stderr)
        );
    }
    let mut listener = listens.then(|| {
        printing(
            omnilock,
            &["elect", "--store", url, "--listen", "--json", &name],
            &mut reaper,
        )
    });

    let mut first = candidate(omnilock, url, &name, "leader-one", &first_marker);
    reaper.watch(&first);
    let first_term = token_written(&first_marker, &mut first, "the first candidate");
    let mut second = candidate(omnilock, url, &name, "leader-two", &second_marker);
    reaper.watch(&second);
    if let Some((_, lines)) = &listener {
        wait_for_leader(lines, "leader-one");
    }
    std::thread::sleep(Duration::from_millis(300));
    assert!(!second_marker.exists(), "two leaders at once");

    signal(&first, "-TERM", false);
    let status = first.wait_within("the first leader", Duration::from_secs(30));
    assert_eq!(
        status.code(),
        Some(143),
        "the first leader exits with its command's status"
    );
    let second_term = token_written(&second_marker, &mut second, "the second candidate");
    assert!(
        second_term > first_term,
        "term {second_term} after {first_term}"
    );
    if let Some((_, lines)) = &listener {
        wait_for_leader(lines, "leader-two");
    }

    let broke = Command::new(omnilock)
        .args(["break", "--store", url, &format!("election/{name}")])
        .stdin(Stdio::null())
        .output_or_fail("break");
    assert_eq!(broke.status.code(), Some(0), "{}", text(&broke.stderr));
    let status = second.wait_within("the second leader", Duration::from_secs(30));
    let stderr = stderr_of(&mut second);
    assert_eq!(
        status.code(),
        Some(70),
        "a leader whose leadership was taken exits 70: {stderr}"
    );

    if let Some((listener, _)) = &mut listener {
        signal(listener, "-INT", false);
        let status = listener.wait_within("the listener", Duration::from_secs(10));
        assert_eq!(
            status.code(),
            Some(0),
            "the listener ends cleanly on SIGINT"
        );
    }
}
