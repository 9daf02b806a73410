//! The `omnilock` command, end to end: every exit status, the child's
//! environment, signal forwarding, and the embedded default store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use omnilock_harness::deadline::{RunBounded, WaitBounded};
use omnilock_harness::process::{WithoutTerminal, running, scratch_dir, sqlite_store, text};

const OMNILOCK: &str = env!("CARGO_BIN_EXE_omnilock");

/// A fresh directory for one test.
fn scratch(test: &str) -> PathBuf {
    scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("cli"), test)
}

/// `omnilock` as cron or systemd would start it: no controlling terminal,
/// whatever terminal the tests run in.
fn omnilock(args: &[&str]) -> Command {
    let mut command = Command::new(OMNILOCK);
    command
        .args(args)
        .env_remove("OMNILOCK_STORE")
        .stdin(Stdio::null())
        .without_terminal();
    command
}

fn run(args: &[&str]) -> Output {
    omnilock(args).output_or_fail("run omnilock")
}

/// `omnilock run --store <store> <rest>`, to be started.
fn run_on(store: &str, rest: &[&str]) -> Command {
    let mut args = vec!["run", "--store", store];
    args.extend_from_slice(rest);
    omnilock(&args)
}

/// Like [`run_at`], for a command that runs `"$OMNILOCK"` on `"$STORE"`
/// itself.
fn run_nested(store: &str, rest: &[&str]) -> Output {
    run_on(store, rest)
        .env("OMNILOCK", OMNILOCK)
        .env("STORE", store)
        .output_or_fail("run omnilock")
}

/// `omnilock run --store <store> <rest>`, run to its end.
fn run_at(store: &str, rest: &[&str]) -> Output {
    run_on(store, rest).output_or_fail("run omnilock")
}

#[test]
fn command_gets_token_and_lock_name() {
    let out = run_at(
        "mem://",
        &[
            "job",
            "--",
            "sh",
            "-c",
            "echo token=$OMNILOCK_TOKEN lock=$OMNILOCK_LOCK",
        ],
    );
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    let token: u64 = stdout
        .trim()
        .strip_prefix("token=")
        .and_then(|rest| rest.split_whitespace().next())
        .and_then(|t| t.parse().ok())
        .unwrap_or_else(|| panic!("no token in {stdout:?}"));
    assert!(token > 0);
    assert!(stdout.contains("lock=job"), "{stdout}");
}

#[test]
fn exit_status_is_the_commands() {
    let out = run_at("mem://", &["job", "--", "sh", "-c", "exit 3"]);
    assert_eq!(out.status.code(), Some(3));
    let out = run_at("mem://", &["job", "--", "sh", "-c", "kill -9 $$"]);
    assert_eq!(out.status.code(), Some(128 + 9));
    let out = run_at("mem://", &["job", "--", "/no/such/program"]);
    assert_eq!(out.status.code(), Some(127));
}

/// A command that cannot start gets one message, naming it: no warning
/// about the guardian (started without a terminal, the command would have
/// had a process group and a guardian of its own) follows, however
/// long the release that comes after takes (on SQLite, a write).
#[test]
fn a_command_that_cannot_start_gets_one_message() {
    let dir = scratch("cannot-start");
    let script = dir.join("not-executable");
    std::fs::write(&script, "echo hi\n").expect("write the script");
    let store = sqlite_store(&dir);
    for _ in 0..5 {
        let out = run_on(&store, &["job", "--"])
            .arg(&script)
            .output_or_fail("run omnilock");
        let said = text(&out.stderr);
        assert_eq!(out.status.code(), Some(126), "{said}");
        assert!(said.contains("cannot run"), "{said}");
        assert_eq!(said.lines().count(), 1, "one message, no more: {said}");
    }
}

#[test]
fn bad_arguments_exit_64() {
    let long = "x".repeat(300);
    let cases: Vec<Vec<&str>> = vec![
        vec!["run", "job"],                                            // no command
        vec!["run", "--wait", "soon", "job", "--", "true"],            // bad duration
        vec!["run", "--wait", "1s", "--no-wait", "job", "--", "true"], // conflicting
        vec!["run", "--store", "mem://", "", "--", "true"],            // empty name
        vec!["run", "--store", "mem://", &long, "--", "true"],         // name too long
        vec!["run", "--store", "mem://", "a\nb", "--", "true"],        // control character
        vec!["run", "--store", "nosuch://x", "job", "--", "true"],     // unknown scheme
        vec!["run", "--store", "mem://?tll=1s", "job", "--", "true"],  // unknown option
        vec!["run", "--store", "redis:/x", "job", "--", "true"],       // malformed URL
        vec!["run", "--store", "mem://?ttl=1ms", "job", "--", "true"], // TTL too short
        vec!["frobnicate"],
    ];
    for args in cases {
        usage_error(&args);
    }
}

/// Runs `omnilock <args>`, which must be refused as a usage error: exit
/// 64, with a message. Returns the message.
fn usage_error(args: &[&str]) -> String {
    let out = run(args);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(64), "{args:?}: {stderr}");
    assert!(!stderr.trim().is_empty(), "{args:?}: no message");
    stderr
}

#[test]
fn passwords_never_printed() {
    let out = run_at(
        "postgres://app:hunter2@127.0.0.1:1/db?connect_timeout=200ms",
        &["job", "--", "true"],
    );
    let all = format!("{}{}", text(&out.stdout), text(&out.stderr));
    assert!(!all.contains("hunter2"), "{all}");
    assert_ne!(out.status.code(), Some(0));
}

/// A refused password exits 77 (EX_NOPERM), not 64 "bad arguments": the
/// URL is well formed and the password was right once. The message says
/// what was refused and never shows the password.
#[test]
fn refused_credentials_exit_77() {
    let url = omnilock_testkit::store_url("REDIS").expect("OMNILOCK_TEST_REDIS_URL");
    let password = omnilock::raw::StoreUrl::parse(&url)
        .expect("the test URL")
        .password()
        .expect("the test Redis has a password")
        .expose()
        .to_string();
    let wrong = url.replacen(&password, "not-the-password", 1);
    let out = run_at(&wrong, &["job", "--", "true"]);
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(77), "{stderr}");
    assert!(stderr.contains("refused the credentials"), "{stderr}");
    assert!(!stderr.contains("not-the-password"), "{stderr}");
}

#[test]
fn busy_lock_exits_75() {
    let dir = scratch("busy");
    let store = sqlite_store(&dir);
    // The outer run holds "job" while the inner ones try it from other processes.
    let inner = "\"$OMNILOCK\" run --store \"$STORE\" --no-wait job -- true; echo no-wait=$?; \
         \"$OMNILOCK\" run --store \"$STORE\" --wait 200ms job -- true; echo wait=$?";
    let out = run_nested(&store, &["job", "--", "sh", "-c", inner]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no-wait=75"), "{stdout}");
    assert!(stdout.contains("wait=75"), "{stdout}");
    let stderr = text(&out.stderr);
    assert_eq!(stderr.lines().count(), 2, "one line per refusal: {stderr}");
    // Free again afterwards.
    let out = run_at(&store, &["--no-wait", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
}

#[test]
fn unreachable_store_exits_69() {
    let out = run_at(
        "sqlite:///nonexistent-omnilock-dir/x/locks.db",
        &["job", "--", "true"],
    );
    assert_eq!(out.status.code(), Some(69), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("unavailable"),
        "{}",
        text(&out.stderr)
    );
}

/// A lost lock stops the command: its group gets SIGTERM, omnilock exits 70,
/// and it returns only once nothing of the command runs (a group member
/// that ignores SIGTERM gets SIGKILL after the grace).
#[test]
fn lost_lock_exits_70_after_sigterm_to_command() {
    let dir = scratch("lost");
    let store = sqlite_store(&dir);
    let marker = dir.join("terminated");
    let stubborn = dir.join("stubborn");
    // The command starts a member that ignores SIGTERM, breaks its own lock
    // from another process, then waits to be told: omnilock notices at its
    // next renewal.
    let script = format!(
        "sh -c 'trap \"\" TERM; echo $$ > \"{p}\"; while :; do sleep 0.2; done' & \
         while [ ! -s \"{p}\" ]; do sleep 0.05; done; \
         trap 'touch \"{m}\"; exit 0' TERM; \"$OMNILOCK\" break --store \"$STORE\" job; \
         for i in $(seq 300); do sleep 0.1; done",
        p = stubborn.display(),
        m = marker.display()
    );
    let started = Instant::now();
    let out = run_nested(&store, &["--ttl", "1s", "job", "--", "sh", "-c", &script]);
    assert_eq!(out.status.code(), Some(70), "{}", text(&out.stderr));
    assert!(marker.exists(), "the command did not get SIGTERM");
    assert!(started.elapsed() < Duration::from_secs(25));
    let pid: i32 = std::fs::read_to_string(&stubborn)
        .expect("pid file")
        .trim()
        .parse()
        .expect("pid");
    assert!(
        !running(pid),
        "a member ignoring SIGTERM outlived omnilock after the loss"
    );
}

#[test]
fn demo_runs_on_the_embedded_default() {
    let dir = scratch("demo");
    let out = omnilock(&["demo", "--workers", "3", "--rounds", "2"])
        .env("XDG_DATA_HOME", &dir)
        .output_or_fail("demo");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert_eq!(
        stdout.lines().filter(|l| l.starts_with("grant")).count(),
        6,
        "{stdout}"
    );
    assert!(
        stdout.contains("fencing tokens strictly increasing"),
        "{stdout}"
    );
    assert!(
        dir.join("omnilock/locks.db").exists(),
        "the default store file was not created"
    );
    let help = omnilock(&["--help"])
        .env("XDG_DATA_HOME", &dir)
        .output_or_fail("help");
    assert!(text(&help.stdout).contains(&format!("{}/omnilock/locks.db", dir.display())));
}

/// `--help` shows every scheme the library knows, aliases included.
#[test]
fn help_lists_every_scheme() {
    let help = omnilock(&["--help"]).output_or_fail("help");
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    for (scheme, _) in omnilock::SCHEMES {
        assert!(
            help.contains(&format!("{scheme}://")),
            "--help lacks {scheme}://:\n{help}"
        );
    }
}

/// flock(1) habits: `-w SECONDS` and `--timeout` wait as `--wait` does,
/// and a bare number is seconds; a bad one is a usage error.
#[test]
fn flock_wait_habits_work() {
    let dir = scratch("flock-habits");
    let store = sqlite_store(&dir);
    let inner = "\"$OMNILOCK\" run --store \"$STORE\" -w 0.2 job -- true; echo w=$?; \
         \"$OMNILOCK\" run --store \"$STORE\" --timeout 1 job -- true; echo timeout=$?";
    let out = run_nested(&store, &["job", "--", "sh", "-c", inner]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("w=75"), "{stdout}");
    assert!(stdout.contains("timeout=75"), "{stdout}");
    let out = run_at(&store, &["-w", "3", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    for bad in ["-1", "1.2.3", "99999999999999999999", "ten"] {
        let out = run_at(&store, &["-w", bad, "job", "--", "true"]);
        assert_eq!(
            out.status.code(),
            Some(64),
            "-w {bad}: {}",
            text(&out.stderr)
        );
    }
}

/// `run --help` lists the exit statuses a script tests; the global help
/// names OMNILOCK_LOG.
#[test]
fn help_shows_exit_statuses_and_logging() {
    let help = run(&["run", "--help"]);
    assert_eq!(help.status.code(), Some(0));
    let help = text(&help.stdout);
    for status in [
        "75 lock not acquired",
        "69 store unreachable",
        "70 lock lost",
    ] {
        assert!(
            help.contains(status),
            "run --help lacks {status:?}:\n{help}"
        );
    }
    let help = text(&run(&["--help"]).stdout);
    assert!(help.contains("OMNILOCK_LOG"), "{help}");
}

/// Completion scripts for each shell, and manual pages: printed, or one
/// per subcommand written to a directory. None needs a store.
#[test]
fn completions_and_manual_pages() {
    for shell in ["bash", "zsh", "fish", "elvish", "powershell"] {
        let out = run(&["completions", shell]);
        assert_eq!(out.status.code(), Some(0), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains("omnilock"), "{shell}: {script}");
        assert!(
            script.contains("--no-wait"),
            "{shell} completes run's flags: {script}"
        );
    }
    let out = run(&["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));

    let page = run(&["man"]);
    assert_eq!(page.status.code(), Some(0), "{}", text(&page.stderr));
    let page = text(&page.stdout);
    assert!(page.contains(".TH omnilock 1"), "{page}");
    let dir = scratch("man");
    let out = run(&["man", dir.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let run_page = std::fs::read_to_string(dir.join("omnilock-run.1")).expect("omnilock-run.1");
    assert!(run_page.contains("no\\-wait"), "{run_page}");
    assert!(run_page.contains("Exit status"), "{run_page}");
    let out = run(&["man", dir.join("omnilock-run.1/x").to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(73), "{}", text(&out.stderr));
}

/// Without HOME (or with a relative one) there is no embedded default, and
/// `mem://` is never picked instead: it excludes nothing between processes.
#[test]
fn no_home_means_no_default_store() {
    use std::os::unix::ffi::OsStrExt;
    let not_utf8 = std::ffi::OsStr::from_bytes(b"/tmp/omnilock-\xff-home");
    let mut command = omnilock(&["run", "job", "--", "true"]);
    command
        .env_clear()
        .env("PATH", std::env::var_os("PATH").unwrap());
    let out = command.env("HOME", not_utf8).output_or_fail("run");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("UTF-8"), "{}", text(&out.stderr));
    for home in [None, Some("relative/home")] {
        let mut command = omnilock(&["run", "job", "--", "true"]);
        command
            .env_clear()
            .env("PATH", std::env::var_os("PATH").unwrap());
        if let Some(home) = home {
            command
                .env("HOME", home)
                .env("XDG_DATA_HOME", "also/relative");
        }
        let out = command.output_or_fail("run");
        let stderr = text(&out.stderr);
        assert_eq!(out.status.code(), Some(64), "HOME={home:?}: {stderr}");
        for hint in ["--store", "OMNILOCK_STORE", "HOME"] {
            assert!(
                stderr.contains(hint),
                "HOME={home:?}: no {hint} in {stderr}"
            );
        }
    }
}

/// A bad TTL is refused before any I/O: no wait on an unreachable server,
/// no database file created.
#[test]
fn input_is_checked_before_any_io() {
    let dir = scratch("before-io");
    let file = dir.join("never.db");
    let sqlite = format!("sqlite://{}", file.display());
    let sqlite_bad_ttl = format!("{sqlite}?ttl=1ms");
    for args in [
        vec![
            "run",
            "--ttl",
            "1ms",
            "--store",
            "redis://10.255.255.1:1",
            "j",
            "--",
            "true",
        ],
        vec!["run", "--ttl", "1ms", "--store", &sqlite, "j", "--", "true"],
        vec!["run", "--store", &sqlite_bad_ttl, "j", "--", "true"],
        vec![
            "run", "--ttl", "100d", "--store", &sqlite, "j", "--", "true",
        ],
    ] {
        let started = Instant::now();
        usage_error(&args);
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "{args:?} did I/O first"
        );
        assert!(!file.exists(), "{args:?} created the database file");
    }
}

/// flock's -E: the busy and timed-out outcomes get a status of the user's
/// choosing, so they cannot be mistaken for the command's own 75.
#[test]
fn conflict_exit_code_is_configurable() {
    let dir = scratch("conflict");
    let store = sqlite_store(&dir);
    let inner = "\"$OMNILOCK\" run --store \"$STORE\" -E 3 --no-wait job -- true; echo no-wait=$?; \
         \"$OMNILOCK\" run --store \"$STORE\" --conflict-exit-code 4 --wait 200ms job -- true; \
         echo wait=$?";
    let out = run_nested(&store, &["job", "--", "sh", "-c", inner]);
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no-wait=3"), "{stdout}");
    assert!(stdout.contains("wait=4"), "{stdout}");
    let out = run_at("mem://", &["-E", "300", "job", "--", "true"]);
    assert_eq!(out.status.code(), Some(64), "-E takes 0 to 255");
}

/// The command never sees OMNILOCK_STORE (it may carry a password).
#[test]
fn store_url_is_not_passed_to_the_command() {
    let dir = scratch("env");
    let out = omnilock(&[
        "run",
        "job",
        "--",
        "sh",
        "-c",
        "echo store=${OMNILOCK_STORE-unset}",
    ])
    .env("OMNILOCK_STORE", sqlite_store(&dir))
    .output_or_fail("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "store=unset");
}

/// The embedded default's directory is 0700 and its file 0600.
#[test]
fn default_store_is_private_to_the_user() {
    use std::os::unix::fs::PermissionsExt;
    let dir = scratch("private");
    let out = omnilock(&["run", "job", "--", "true"])
        .env("XDG_DATA_HOME", &dir)
        .output_or_fail("run");
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    let mode = |p: &Path| std::fs::metadata(p).expect("metadata").permissions().mode() & 0o777;
    assert_eq!(mode(&dir.join("omnilock")), 0o700);
    assert_eq!(mode(&dir.join("omnilock/locks.db")), 0o600);
}

/// Every signal omnilock forwards reaches the command (HUP, QUIT, USR1 and
/// USR2 used to kill omnilock and orphan it), omnilock exits with the
/// command's status, and the lock is released.
#[test]
fn signals_reach_the_command_and_the_lock_is_released() {
    let dir = scratch("signals");
    let store = sqlite_store(&dir);
    for (signal, number) in [
        ("TERM", libc::SIGTERM),
        ("INT", libc::SIGINT),
        ("HUP", libc::SIGHUP),
        ("QUIT", libc::SIGQUIT),
        ("USR1", libc::SIGUSR1),
        ("USR2", libc::SIGUSR2),
    ] {
        let ready = dir.join(format!("ready-{signal}"));
        let script = format!(
            "trap 'exit 42' {signal}; touch \"{}\"; while :; do sleep 0.05; done",
            ready.display()
        );
        let mut child = run_on(&store, &["job", "--", "sh", "-c", &script])
            .spawn()
            .expect("spawn");
        wait_until_exists(&ready, &format!("SIG{signal}: the command"));
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(child.id() as libc::pid_t, number) };
        let status = child.wait_or_fail("wait");
        assert_eq!(
            status.code(),
            Some(42),
            "SIG{signal} did not reach the command"
        );
        let out = run_at(&store, &["--no-wait", "job", "--", "true"]);
        assert_eq!(out.status.code(), Some(0), "SIG{signal}: lock not released");
    }
}

/// The test command may be started with signals ignored: `nohup` ignores
/// SIGHUP, and CI launchers and cron wrappers SIGINT and SIGQUIT too, which
/// every process started inherits (and `omnilock` keeps ignored signals
/// ignored). The signal test above resets what it sends in the processes
/// it starts, so it passes there too instead of waiting for ever.
#[test]
fn the_signal_test_passes_with_signals_ignored() {
    use std::os::unix::process::CommandExt as _;
    let mut nested = Command::new(std::env::current_exe().expect("this test binary"));
    nested.args([
        "signals_reach_the_command_and_the_lock_is_released",
        "--exact",
        "--test-threads",
        "1",
    ]);
    // SAFETY: signal(2) between fork and exec is async-signal-safe.
    unsafe {
        nested.pre_exec(|| {
            for signal in [libc::SIGHUP, libc::SIGINT, libc::SIGQUIT] {
                libc::signal(signal, libc::SIG_IGN);
            }
            Ok(())
        });
    }
    // Longer than the nested test's own deadline on its processes, so
    // that a hang there is reported by it, with its reason.
    let child = nested
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .expect("start the signal test");
    let limit = omnilock_harness::deadline::PROCESS_DEADLINE * 2;
    let out = child.output_within("the signal test, signals ignored", limit);
    let said = text(&out.stdout);
    assert!(out.status.success(), "{said}{}", text(&out.stderr));
    assert!(
        said.contains("1 passed"),
        "the signal test did not run: {said}"
    );
}

/// Waits (30 s at most) until the command under test has created `path`.
fn wait_until_exists(path: &Path, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !path.exists() {
        assert!(Instant::now() < deadline, "{who} never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What the command leaves running in its process group still works under
/// the lock (flock(1) keeps its lock while any process holding its
/// descriptor lives): the lock is kept until that has exited too.
#[test]
fn background_children_keep_the_lock() {
    let dir = scratch("background");
    let store = sqlite_store(&dir);
    let done = dir.join("background-done");
    let script = format!("(sleep 2; touch '{}') & exit 0", done.display());
    let mut first = run_on(&store, &["job", "--", "sh", "-c", &script])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    // The shell exits at once; its background child holds on.
    std::thread::sleep(Duration::from_millis(700));
    let probe = run_at(&store, &["--no-wait", "job", "--", "true"]);
    assert!(
        !done.exists(),
        "the background work ended too early for the test"
    );
    assert_eq!(
        probe.status.code(),
        Some(75),
        "the lock was released while the command's background child still ran"
    );
    let status = first.wait_or_fail("wait");
    assert_eq!(status.code(), Some(0));
    assert!(done.exists(), "omnilock exited before its command's group");
    let after = run_at(&store, &["--no-wait", "job", "--", "true"]);
    assert_eq!(after.status.code(), Some(0), "{}", text(&after.stderr));
}

/// A signal omnilock was started with ignored (nohup) stays ignored, for
/// the command too, and does not end the run.
#[test]
fn ignored_signals_stay_ignored() {
    use std::os::unix::process::CommandExt as _;
    let dir = scratch("nohup");
    let store = sqlite_store(&dir);
    let ready = dir.join("ready");
    let script = format!(
        "grep SigIgn /proc/self/status; touch '{}'; sleep 1",
        ready.display()
    );
    let mut command = run_on(&store, &["job", "--", "sh", "-c", &script]);
    // SAFETY: signal(2) between fork and exec, as nohup does.
    unsafe {
        command.pre_exec(|| {
            libc::signal(libc::SIGHUP, libc::SIG_IGN);
            Ok(())
        });
    }
    let child = command.stdout(Stdio::piped()).spawn().expect("spawn");
    wait_until_exists(&ready, "the command");
    // SAFETY: signalling a child we spawned and have not reaped.
    unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
    let out = child.output_or_fail("wait");
    assert_eq!(out.status.code(), Some(0), "SIGHUP ended the run");
    let mask = text(&out.stdout)
        .split_whitespace()
        .nth(1)
        .and_then(|m| u64::from_str_radix(m, 16).ok())
        .expect("SigIgn line");
    assert_ne!(
        mask & (1 << (libc::SIGHUP - 1)),
        0,
        "the command lost the ignored SIGHUP"
    );
}

/// A command killed by SIGINT makes omnilock die of SIGINT, not exit 130, so
/// a shell loop around it stops as it would for the command alone.
#[test]
fn a_command_killed_by_sigint_makes_omnilock_die_of_it() {
    use std::os::unix::process::ExitStatusExt;
    let out = run_at("mem://", &["job", "--", "sh", "-c", "kill -INT $$"]);
    assert_eq!(out.status.signal(), Some(libc::SIGINT), "{:?}", out.status);
}

/// The cross-process conformance scenarios, on every store that spans
/// processes and has a test URL.
mod cross_process {
    use super::*;
    use omnilock_harness::process;
    use omnilock_testkit::store_url;

    /// Every store that spans processes and has a test URL.
    const STORES: &[&str] = &[
        "SQLITE",
        "MYSQL",
        "POSTGRES",
        "REDIS",
        "REDIS_CLUSTER",
        "REDIS_SENTINEL",
        "REDLOCK",
        "ETCD",
        "ETCD_LOCKAPI",
        "ZK",
    ];

    /// How the stores of one test take their turns.
    #[derive(Clone, Copy)]
    enum Turns {
        /// One store after another: the scenario keeps the CPUs busy.
        OneByOne,
        /// Every store at once: the scenario mostly waits for a lease to
        /// run out, and the stores waiting side by side cost no more time
        /// than one.
        AtOnce,
    }

    /// `scenario` on the embedded default (a private SQLite file), which
    /// always runs, and on every store of [`STORES`] with a test URL.
    fn each_store(test: &str, turns: Turns, scenario: impl Fn(&Path, &str, &Path) + Sync) {
        let dir = scratch(test);
        let mut runs = vec![("sqlite-private".to_string(), sqlite_store(&dir))];
        runs.extend(urls(STORES));
        run_all(&dir, test, turns, runs, scenario);
    }

    /// `scenario` on every store of `stores` (their test URLs).
    fn each_of(
        stores: &[&str],
        test: &str,
        turns: Turns,
        scenario: impl Fn(&Path, &str, &Path) + Sync,
    ) {
        run_all(&scratch(test), test, turns, urls(stores), scenario);
    }

    /// The stores of `stores` that have a test URL, by lower-case name.
    fn urls(stores: &[&str]) -> Vec<(String, String)> {
        let with_url = stores
            .iter()
            .filter_map(|store| Some((store.to_lowercase(), store_url(store)?)));
        with_url.collect()
    }

    /// `scenario` on each `(store, url)`, each in a scratch directory of
    /// its own (the scenarios name their locks after it).
    fn run_all(
        dir: &Path,
        test: &str,
        turns: Turns,
        runs: Vec<(String, String)>,
        scenario: impl Fn(&Path, &str, &Path) + Sync,
    ) {
        let run = |store: &str, url: &str| {
            eprintln!("{test}: {store}");
            let dir = dir.join(store);
            std::fs::create_dir_all(&dir).expect("scratch dir");
            scenario(Path::new(OMNILOCK), url, &dir);
        };
        match turns {
            Turns::OneByOne => runs.iter().for_each(|(store, url)| run(store, url)),
            Turns::AtOnce => std::thread::scope(|scope| {
                let threads: Vec<_> = runs
                    .iter()
                    .map(|(store, url)| (store, scope.spawn(|| run(store, url))))
                    .collect();
                let failed: Vec<_> = threads
                    .into_iter()
                    .filter_map(|(store, thread)| thread.join().is_err().then_some(store.as_str()))
                    .collect();
                assert!(failed.is_empty(), "{test} failed on {failed:?}");
            }),
        }
    }

    #[test]
    fn counter_across_processes() {
        each_store("counter", Turns::OneByOne, |bin, url, dir| {
            process::counter_across_processes(bin, url, dir, 4)
        });
    }

    /// The embedded default under load: 8 processes hammering one SQLite file
    /// keep exclusion and all make progress.
    #[test]
    fn eight_processes_on_one_sqlite_file() {
        let dir = scratch("eight");
        process::counter_across_processes(Path::new(OMNILOCK), &sqlite_store(&dir), &dir, 8);
    }

    /// The stores with semaphores and read-write locks: all but Redlock.
    fn counted() -> Vec<&'static str> {
        let counted = STORES.iter().filter(|store| **store != "REDLOCK");
        counted.copied().collect()
    }

    #[test]
    fn permits_across_processes() {
        each_of(&counted(), "permits", Turns::OneByOne, |bin, url, dir| {
            process::permits_across_processes(bin, url, dir, 6)
        });
    }

    #[test]
    fn rw_across_processes() {
        each_of(&counted(), "rw", Turns::OneByOne, |bin, url, dir| {
            process::rw_across_processes(bin, url, dir, 6)
        });
    }

    /// SIGKILL to the holder of the only permit, and to a writer: the next
    /// process gets it within TTL + 1 s.
    #[test]
    fn killed_permit_holder_and_writer_free_them() {
        each_of(
            &counted(),
            "killed-permit",
            Turns::AtOnce,
            process::killed_permit_holder_frees_permit,
        );
        each_of(
            &counted(),
            "killed-writer",
            Turns::AtOnce,
            process::killed_writer_frees_lock,
        );
    }

    /// Callers of two permit counts at once: the refused ones (exit 65)
    /// leave nothing in the line that would hold up the others.
    #[test]
    fn mismatched_permits_leave_the_line_at_once() {
        // One store at a time: twelve processes each, timed.
        each_of(
            &counted(),
            "mismatch",
            Turns::OneByOne,
            process::mismatched_permits_leave_the_line_at_once,
        );
    }

    /// SIGSTOP past the TTL to the holder of the only permit: the next
    /// process takes it, the resumed one exits 70, and its release does not
    /// free the new holder's permit.
    #[test]
    fn paused_permit_holder_loses_permit() {
        each_of(
            &counted(),
            "paused-permit",
            Turns::AtOnce,
            process::paused_permit_holder_loses_permit,
        );
    }

    /// A store without semaphores (Redlock) says so: exit 64 and a message
    /// naming the semaphore, before running anything.
    #[test]
    fn permits_on_a_store_without_semaphores_exits_64() {
        let store = store_url("REDLOCK").expect("store URL");
        let out = run_at(&store, &["--permits", "2", "jobs", "--", "true"]);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
        assert!(
            text(&out.stderr).contains("semaphore"),
            "{}",
            text(&out.stderr)
        );
        let out = run_at(&store, &["--permits", "0", "jobs", "--", "true"]);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
        let out = run_at(&store, &["--read", "--write", "jobs", "--", "true"]);
        assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    }

    /// `status`, `ls` and `break` see and remove what `omnilock run`
    /// processes hold, on every store (Redlock: the mutex only).
    #[test]
    fn operator_commands_see_and_break_running_holds() {
        each_store("operator", Turns::AtOnce, |bin, url, dir| {
            let redlock = url.starts_with("redlock");
            let offers = omnilock_harness::operator::Offers {
                // etcd's Lock RPC keys record no owner.
                inspect: !url.contains("mode=lockapi"),
                list: true,
                counted: !redlock,
            };
            omnilock_harness::operator::operator_view_across_processes(bin, url, dir, offers)
        });
    }

    /// `--min-hold` and `--max-hold` across processes, on every store.
    #[test]
    fn scheduled_job_rules_hold_across_processes() {
        each_store("job-rules", Turns::AtOnce, |bin, url, dir| {
            omnilock_harness::job_rules::min_hold_across_processes(bin, url, dir);
            omnilock_harness::job_rules::max_hold_across_processes(bin, url, dir);
            omnilock_harness::job_rules::once_per_across_processes(bin, url, dir);
        });
        omnilock_harness::job_rules::contradicting_rules_are_refused(Path::new(OMNILOCK), "mem://");
    }

    /// `omnilock elect` across processes, on every store.
    #[test]
    fn elect_runs_one_leader_at_a_time() {
        each_store("elect", Turns::AtOnce, |bin, url, dir| {
            // Redlock and etcd's Lock RPC cannot say who leads.
            let listens = !url.starts_with("redlock") && !url.contains("mode=lockapi");
            omnilock_harness::elect::elect_across_processes(bin, url, dir, listens)
        });
    }

    #[test]
    fn killed_holder_frees_lock() {
        each_store("killed", Turns::AtOnce, process::killed_holder_frees_lock);
    }

    #[test]
    fn killed_wrapper_takes_its_command_along() {
        each_store(
            "wrapper",
            Turns::AtOnce,
            process::killed_wrapper_takes_its_command_along,
        );
    }

    #[test]
    fn paused_holder_loses_lock() {
        each_store("paused", Turns::AtOnce, process::paused_holder_loses_lock);
    }
}
