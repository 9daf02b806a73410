//! `omnilock-bench`, end to end: every workload on two stores, the table
//! and results.json, and bad input refused before anything runs.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use omnilock_harness::process::{scratch_dir, sqlite_store, text};

const BENCH: &str = env!("CARGO_BIN_EXE_omnilock-bench");

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("bench"), test)
}

fn run(args: &[&str]) -> Output {
    Command::new(BENCH)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("run omnilock-bench")
}

/// `omnilock-bench` runs every workload on every store given, prints one
/// table row per run and writes the same rows to results.json, with the
/// uncontended p50 as a ratio of the store's own floor.
#[test]
fn bench_compares_stores_and_writes_json() {
    let dir = scratch("bench");
    let sqlite = sqlite_store(&dir);
    let out_dir = dir.join("out");
    let out = run(&[
        "--store",
        "mem://",
        "--store",
        &sqlite,
        "--workload",
        "floor,uncontended,contended,contended-apart",
        "--workload",
        "many-locks,handoff,herd",
        "--workload",
        "semaphore,rw,many-held",
        "--held",
        "200",
        // Renewed every third of it: 300 ms lost every SQLite lock once,
        // with other suites running beside this one on 2 cores.
        "--held-ttl",
        "1s",
        "--duration",
        "200ms",
        "--clients",
        "1,3",
        "--herd-waiters",
        "2",
        "--out",
        out_dir.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    // Per store: floor, uncontended, contended x 2, contended-apart x 2,
    // many-locks, handoff, herd, semaphore, rw, many-held; SQLite's
    // hand-off also has its floor after the same idle time (the in-memory
    // store has no floor).
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| mem://")).count(),
        12,
        "{table}"
    );
    assert_eq!(
        table
            .lines()
            .filter(|l| l.starts_with("| sqlite://"))
            .count(),
        13,
        "{table}"
    );
    let json = std::fs::read_to_string(out_dir.join("results.json")).expect("results.json");
    let rows: Vec<serde_json::Value> = serde_json::from_str(&json).expect("results.json is JSON");
    assert_eq!(rows.len(), 25, "{json}");
    for row in &rows {
        if row["workload"] == "many-held" {
            // 200 locks held through their renewals, none lost.
            let note = row["note"].as_str().unwrap_or_default();
            assert!(note.contains("200 locks held"), "{row}");
            assert!(note.contains("KiB heap per held lock"), "{row}");
            assert!(!note.contains("lost"), "{row}");
        }
        if ["contended", "contended-apart"].contains(&row["workload"].as_str().unwrap_or_default())
        {
            let note = row["note"].as_str().unwrap_or_default();
            assert!(note.contains("hand-offs/s"), "{row}");
        }
        let measured = [
            "uncontended",
            "contended",
            "contended-apart",
            "many-locks",
            "handoff",
            "many-held",
        ]
        .iter()
        .any(|w| row["workload"] == *w);
        // Semaphores and read-write locks: both stores have them.
        let shared = ["semaphore", "rw"].iter().any(|w| row["workload"] == *w);
        if measured || shared {
            assert_ne!(row["ops"], 0, "a run did no work: {row}");
        }
    }
    // SQLite has a floor probe, so its uncontended row carries a ratio.
    let sqlite_uncontended = rows
        .iter()
        .find(|r| {
            r["store"]
                .as_str()
                .is_some_and(|s| s.starts_with("sqlite://"))
                && r["workload"] == "uncontended"
        })
        .expect("sqlite uncontended row");
    assert!(
        sqlite_uncontended["ratio_to_floor"].is_f64(),
        "{sqlite_uncontended}"
    );
    // Its hand-off has the floor beside it, after the same idle time.
    assert!(
        rows.iter().any(|r| r["workload"] == "handoff"
            && r["by"] == "floor"
            && r["store"]
                .as_str()
                .is_some_and(|s| s.starts_with("sqlite://"))),
        "{json}"
    );
    // The in-memory store has neither floor nor counter: said, not faked.
    assert!(json.contains("no floor probe for this store"), "{json}");
}

/// Bad input is refused before any run starts: nothing measured, nothing written.
#[test]
fn bench_refuses_bad_input_before_running() {
    let dir = scratch("bench-bad");
    let out_dir = dir.join("out");
    let out_arg = out_dir.to_str().unwrap();
    for (args, code) in [
        (vec!["--store", "mem://", "--workload", "nope"], 64),
        (
            vec!["--store", "mem://", "--store", "etcd://h?colour=red"],
            64,
        ),
        (
            vec![
                "--store",
                "mem://",
                "--store",
                "redis://:pw@127.0.0.1:1?connect_timeout=500ms",
            ],
            69,
        ),
        (vec!["--store", "mem://", "--duration", "soon"], 64),
        (vec!["--store", "mem://", "--clients", "0"], 64),
        (vec!["--store", "mem://", "--held", "0"], 64),
        (
            vec![
                "--store",
                "mem://",
                "--workload",
                "many-held",
                "--held-ttl",
                "5ms",
            ],
            64,
        ),
    ] {
        let mut all = vec!["--out", out_arg];
        all.extend(args.iter().copied());
        let out = run(&all);
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(code), "{args:?}: {stderr}");
        assert!(
            !stderr.contains("[1/"),
            "{args:?} started running: {stderr}"
        );
        assert!(!stderr.contains(":pw@"), "leaks the password: {stderr}");
        assert!(
            !out_dir.join("results.json").exists(),
            "{args:?} wrote results"
        );
    }
}
