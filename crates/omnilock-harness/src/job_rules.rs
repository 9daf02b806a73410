//! The scheduled-job rules of `omnilock run` across processes:
//! `--min-hold` keeps the lock after a short command, `--max-hold` stops a
//! command that holds too long. Run by the CLI crate's tests for every
//! store.

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::deadline::{RunBounded, WaitBounded};
use crate::process::{WithoutTerminal, lock_name, stderr_of, text, wait_for_file};

/// `omnilock run --no-wait NAME -- true`: its exit status (0 got the lock,
/// 75 busy).
fn try_run(omnilock: &Path, url: &str, name: &str) -> Option<i32> {
    Command::new(omnilock)
        .args(["run", "--store", url, "--no-wait", name, "--", "true"])
        .stdin(Stdio::null())
        .without_terminal()
        .status_or_fail("run omnilock")
        .code()
}

/// A job that ends at once under `--min-hold 5s`: another process cannot
/// take the lock until 5 s after the first took it; the first `omnilock`
/// exits 0 (the command's status) once they have passed, and the lock is
/// free then.
pub fn min_hold_across_processes(omnilock: &Path, url: &str, dir: &Path) {
    let name = lock_name("min-hold", dir);
    let marker = dir.join("min-hold-ran");
    let _ = std::fs::remove_file(&marker);
    // Long enough that a probe ends inside it even when the machine is
    // loaded (CI runs every store's job at once, beside other suites).
    let min_hold = Duration::from_secs(5);
    let started = Instant::now();
    let mut first = Command::new(omnilock)
        .args([
            "run",
            "--store",
            url,
            "--min-hold",
            "5s",
            &name,
            "--",
            "touch",
        ])
        .arg(&marker)
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .without_terminal()
        .spawn()
        .expect("spawn the job");
    wait_for_file(&marker, &mut first, "the job");
    // Probes until the job's omnilock exits: every probe that has ended
    // inside the min-hold (counted from the spawn, which is before the
    // grant) found the lock busy. A probe's own acquire comes some time
    // after its launch (a loaded machine starts a process slowly), so
    // only its end tells that it tried inside the min-hold.
    let mut inside = 0;
    let status = loop {
        if let Some(status) = first.try_wait().expect("status") {
            break status;
        }
        let probe = try_run(omnilock, url, &name);
        let answered_at = started.elapsed();
        if answered_at < min_hold {
            inside += 1;
            assert_eq!(
                probe,
                Some(75),
                "another process took the lock {answered_at:?} into a {min_hold:?} min-hold"
            );
        }
        if started.elapsed() > Duration::from_secs(30) {
            let _ = first.kill();
            panic!("the job's omnilock did not exit within 30 s");
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    let ran_for = started.elapsed();
    assert!(
        inside > 0,
        "no probe ran inside the min-hold (the machine is too slow to tell)"
    );
    assert_eq!(status.code(), Some(0), "the job's own status");
    assert!(
        ran_for >= min_hold,
        "omnilock let go after {ran_for:?}, inside its {min_hold:?} min-hold"
    );
    assert_eq!(
        try_run(omnilock, url, &name),
        Some(0),
        "free once the min-hold passed"
    );
}

/// A run that never started its command (`--once-per` found a record)
/// lets go at once, whatever its `--min-hold`.
fn skipped_run_ignores_min_hold(omnilock: &Path, url: &str, name: &str) {
    let started = Instant::now();
    let out = Command::new(omnilock)
        .args([
            "run",
            "--store",
            url,
            "--once-per",
            "1h",
            "--min-hold",
            "10m",
            name,
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .without_terminal()
        .output_or_fail("run omnilock");
    assert_eq!(out.status.code(), Some(79), "{}", text(&out.stderr));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "a skipped run held the lock for its min-hold"
    );
}

/// A job that would run for ever under `--max-hold 2s`: its command is
/// stopped and `omnilock` exits 70 saying why, a little after 2 s; the
/// lock is free at once for the next process.
pub fn max_hold_across_processes(omnilock: &Path, url: &str, dir: &Path) {
    let name = lock_name("max-hold", dir);
    let marker = dir.join("max-hold-ran");
    let _ = std::fs::remove_file(&marker);
    let spawned = Instant::now();
    let mut job = Command::new(omnilock)
        .args([
            "run",
            "--store",
            url,
            "--ttl",
            "3s",
            "--max-hold",
            "2s",
            &name,
            "--",
            "sh",
            "-c",
        ])
        .arg(format!("touch '{}'; exec sleep 600", marker.display()))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .without_terminal()
        .spawn()
        .expect("spawn the job");
    wait_for_file(&marker, &mut job, "the job");
    // At least 2 s after the spawn (the grant came later); at most a few
    // seconds after the command started (the grant came earlier).
    let started = Instant::now();
    let status = job.wait_within("the job", Duration::from_secs(30));
    let (since_spawn, ran_for) = (spawned.elapsed(), started.elapsed());
    let stderr = stderr_of(&mut job);
    assert_eq!(
        status.code(),
        Some(70),
        "a job past its max-hold exits 70; stderr: {stderr}"
    );
    assert!(
        stderr.contains("--max-hold"),
        "the message names the max hold: {stderr}"
    );
    assert!(
        since_spawn >= Duration::from_secs(2) && ran_for < Duration::from_secs(12),
        "stopped {since_spawn:?} after the spawn, {ran_for:?} after the command started (max-hold 2s)"
    );
    assert_eq!(
        try_run(omnilock, url, &name),
        Some(0),
        "free once the job was stopped"
    );
}

/// Contradicting rules are refused before any I/O, naming the flags.
pub fn contradicting_rules_are_refused(omnilock: &Path, url: &str) {
    let out = Command::new(omnilock)
        .args([
            "run",
            "--store",
            url,
            "--min-hold",
            "1h",
            "--max-hold",
            "1m",
            "job",
            "--",
            "true",
        ])
        .stdin(Stdio::null())
        .output_or_fail("run omnilock");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    let said = text(&out.stderr);
    assert!(
        said.contains("--min-hold") && said.contains("--max-hold"),
        "{said}"
    );
}

/// `--once-per 1h`: 8 processes (as 8 machines' cron would) start the same
/// job within a second; exactly one runs it, the other 7 exit 79 saying it
/// already ran. A run that fails leaves no record: the next start runs.
pub fn once_per_across_processes(omnilock: &Path, url: &str, dir: &Path) {
    let name = lock_name("once-per", dir);
    let runs = dir.join("once-per-runs");
    let _ = std::fs::remove_file(&runs);
    let job = |name: &str, script: &str| {
        Command::new(omnilock)
            .args([
                "run",
                "--store",
                url,
                "--once-per",
                "1h",
                "--wait",
                "60s",
                name,
                "--",
                "sh",
                "-c",
            ])
            .arg(script)
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .without_terminal()
            .spawn()
            .expect("spawn the job")
    };
    let script = format!("echo $$ >> '{}'; sleep 0.3", runs.display());
    let jobs: Vec<_> = (0..8).map(|_| job(&name, &script)).collect();
    let mut statuses = Vec::new();
    let mut said = String::new();
    for job in jobs {
        let out = job.output_or_fail("job");
        said.push_str(&text(&out.stderr));
        statuses.push(out.status.code());
    }
    let ran = std::fs::read_to_string(&runs).unwrap_or_default();
    assert_eq!(
        ran.lines().count(),
        1,
        "exactly one run: {ran:?}; statuses {statuses:?}; {said}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == Some(0)).count(),
        1,
        "{statuses:?}; {said}"
    );
    assert_eq!(
        statuses.iter().filter(|s| **s == Some(79)).count(),
        7,
        "{statuses:?}; {said}"
    );
    assert!(said.contains("already ran"), "{said}");
    skipped_run_ignores_min_hold(omnilock, url, &name);

    // An operator sees the record and can let the job run again.
    let operator = |args: &[&str]| {
        Command::new(omnilock)
            .args(["--store", url])
            .args(args)
            .stdin(Stdio::null())
            .output_or_fail("run omnilock")
    };
    let status = operator(&["status", &name]);
    assert!(
        text(&status.stdout).contains("--once-per record: last run started"),
        "status shows the record: {}",
        text(&status.stdout)
    );
    let deleted = operator(&["break", "--record", &name]);
    assert_eq!(deleted.status.code(), Some(0), "{}", text(&deleted.stderr));
    let again = job(&name, "true").output_or_fail("job");
    assert_eq!(
        again.status.code(),
        Some(0),
        "runs again once the record is deleted: {}",
        text(&again.stderr)
    );

    let failing = format!("{name}/failing");
    let out = job(&failing, "exit 3").output_or_fail("job");
    assert_eq!(out.status.code(), Some(3), "{}", text(&out.stderr));
    let out = job(&failing, "true").output_or_fail("job");
    assert_eq!(
        out.status.code(),
        Some(0),
        "a failed run leaves no record: {}",
        text(&out.stderr)
    );
    let out = job(&failing, "true").output_or_fail("job");
    assert_eq!(
        out.status.code(),
        Some(79),
        "the successful run left one: {}",
        text(&out.stderr)
    );
}
