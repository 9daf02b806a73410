//! Cross-process scenarios: several OS processes running the `omnilock`
//! command against one store. Run by the CLI crate's tests (which know where
//! the binary is) for every store whose capabilities include `cross_process`.

use crate::deadline::{RunBounded, WaitBounded};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// The lock a scenario takes: its kind, this test process and the scratch
/// directory, so runs of one scenario on several stores at once, or on
/// stores that share a server, never meet on one name.
pub(crate) fn lock_name(kind: &str, dir: &Path) -> String {
    let dir = dir
        .file_name()
        .map_or_else(String::new, |d| d.to_string_lossy().into_owned());
    format!("processes/{kind}/{}/{dir}", std::process::id())
}

/// `processes` processes (at least 4) each run 20 critical sections through
/// `omnilock run`, each incrementing a counter file with a read-then-write
/// shell snippet: the file ends at exactly 20 × `processes`.
pub fn counter_across_processes(omnilock: &Path, url: &str, dir: &Path, processes: usize) {
    let counter = dir.join("counter");
    std::fs::write(&counter, "0\n").expect("counter file");
    let name = lock_name("counter", dir);
    let increment = format!(
        "\"$NAME\" -- sh -c 'n=$(cat \"{c}\"); sleep 0.001; echo $((n+1)) > \"{c}\"'",
        c = counter.display()
    );
    run_workers(omnilock, url, &name, processes, 20, |_| increment.clone());
    let total = std::fs::read_to_string(&counter).expect("counter");
    assert_eq!(
        total.trim(),
        (20 * processes).to_string(),
        "increments were lost across processes"
    );
}

/// `processes` processes each take a permit of a `permits`-permit semaphore
/// five times through `omnilock run --permits`, and while holding claim one
/// of `permits` slot directories (`mkdir` is atomic): a process that finds
/// every slot taken has seen one holder too many. The command sees
/// `OMNILOCK_TOKEN` as with the lock.
pub fn permits_across_processes(omnilock: &Path, url: &str, dir: &Path, processes: usize) {
    let permits = 2;
    let slots = dir.join(format!("slots-{}", std::process::id()));
    std::fs::create_dir_all(&slots).expect("slots directory");
    let name = lock_name("permits", dir);
    let inside = format!(
        "[ -n \"$OMNILOCK_TOKEN\" ] || exit 8; \
         for k in $(seq 0 {last}); do \
           if mkdir \"{d}/slot-$k\" 2>/dev/null; then sleep 0.02; rmdir \"{d}/slot-$k\"; exit 0; fi; \
         done; echo VIOLATION: more than {permits} holders >&2; exit 9",
        last = permits - 1,
        d = slots.display()
    );
    run_workers(omnilock, url, &name, processes, 5, |_| {
        format!("--permits {permits} \"$NAME\" -- sh -c '{inside}'")
    });
}

/// `processes` processes, one in three a writer, take the read-write lock
/// five times each through `omnilock run --read` / `--write`; holders mark
/// a shared directory (`mkdir writer` exclusively, `reader-<pid>`) and fail
/// on a reader beside a writer or two writers.
pub fn rw_across_processes(omnilock: &Path, url: &str, dir: &Path, processes: usize) {
    let marks = dir.join(format!("rw-{}", std::process::id()));
    std::fs::create_dir_all(&marks).expect("marks directory");
    let name = lock_name("rw", dir);
    let d = marks.display();
    let reader = format!(
        "mkdir \"{d}/reader-$$\"; \
         if [ -e \"{d}/writer\" ]; then echo VIOLATION: reader beside writer >&2; exit 9; fi; \
         sleep 0.02; rmdir \"{d}/reader-$$\""
    );
    let writer = format!(
        "mkdir \"{d}/writer\" 2>/dev/null || {{ echo VIOLATION: two writers >&2; exit 9; }}; \
         if ls \"{d}\" | grep -q reader-; then echo VIOLATION: writer beside reader >&2; exit 9; fi; \
         sleep 0.02; rmdir \"{d}/writer\""
    );
    run_workers(omnilock, url, &name, processes, 5, |i| {
        if i % 3 == 0 {
            format!("--write \"$NAME\" -- sh -c '{writer}'")
        } else {
            format!("--read \"$NAME\" -- sh -c '{reader}'")
        }
    });
}

/// Starts `processes` shells, each running `omnilock run --store ... --wait
/// 120s <rest>` `rounds` times (`rest` for worker `i`; `$NAME` is `name`),
/// and checks they all succeed.
fn run_workers(
    omnilock: &Path,
    url: &str,
    name: &str,
    processes: usize,
    rounds: usize,
    rest: impl Fn(usize) -> String,
) {
    let mut children = Vec::new();
    for i in 0..processes {
        let script = format!(
            "for i in $(seq {rounds}); do \"$OMNILOCK\" run --store \"$STORE\" --wait 120s {} \
             || exit 1; done",
            rest(i)
        );
        children.push(
            Command::new("sh")
                .arg("-c")
                .arg(&script)
                .env("OMNILOCK", omnilock)
                .env("STORE", url)
                .env("NAME", name)
                .stdin(Stdio::null())
                .spawn()
                .expect("spawn worker shell"),
        );
    }
    for mut child in children {
        let status = child.wait_or_fail("worker");
        assert!(status.success(), "a worker process failed: {status}");
    }
}

/// A holder process killed with SIGKILL: another process gets the lock within
/// TTL + 1 s of the kill.
pub fn killed_holder_frees_lock(omnilock: &Path, url: &str, dir: &Path) {
    killed_holder_frees(omnilock, url, dir, &[]);
}

/// The same for the only permit of a semaphore (`--permits 1`).
pub fn killed_permit_holder_frees_permit(omnilock: &Path, url: &str, dir: &Path) {
    killed_holder_frees(omnilock, url, dir, &["--permits", "1"]);
}

/// The same for a writer (`--write`), freeing the lock for a writer.
pub fn killed_writer_frees_lock(omnilock: &Path, url: &str, dir: &Path) {
    killed_holder_frees(omnilock, url, dir, &["--write"]);
}

/// Callers of two permit counts at once, six of each, every one willing to
/// wait: those of the other count than the one in force are refused (exit
/// 65), and leave nothing in the line. The semaphore never stands idle
/// while callers of its count wait: all are done within seconds, where a
/// refused caller's place left standing in line held up everyone behind it
/// until its session or lease ran out (on ZooKeeper the default TTL,
/// 15 s).
pub fn mismatched_permits_leave_the_line_at_once(omnilock: &Path, url: &str, dir: &Path) {
    let name = lock_name("mismatch", dir);
    let started = Instant::now();
    let mut reaper = KillOnDrop::default();
    let callers: Vec<_> = (0..12)
        .map(|i| {
            let permits = if i % 2 == 0 { "1" } else { "3" };
            let child = Command::new(omnilock)
                .args(["run", "--store", url, "--permits", permits])
                .args(["--wait", "60s", &name, "--", "sleep", "0.2"])
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .without_terminal()
                .spawn()
                .expect("spawn a caller");
            reaper.watch(&child);
            (permits, child)
        })
        .collect();
    let (mut ran, mut refused) = (0, 0);
    for (permits, child) in callers {
        let pid = child.id();
        let out = child.output_or_fail("a caller");
        reaper.reaped(pid);
        match out.status.code() {
            Some(0) => ran += 1,
            Some(65) => refused += 1,
            other => panic!(
                "a caller of {permits} permit(s) exited {other:?}: {}",
                text(&out.stderr)
            ),
        }
    }
    let took = started.elapsed();
    assert!(ran >= 1, "nobody ran ({refused} refused)");
    assert!(
        took < Duration::from_secs(10),
        "12 callers of two counts took {took:?} ({ran} ran, {refused} refused): a refused \
         caller's place in line held up the others"
    );
}

/// A holder of `side` (extra `omnilock run` flags: none for the mutex)
/// killed with SIGKILL; the successor takes the same side.
fn killed_holder_frees(omnilock: &Path, url: &str, dir: &Path, side: &[&str]) {
    let ttl = Duration::from_secs(2);
    let name = format!("{}/{}", lock_name("victim", dir), side.join(""));
    let marker = dir.join("holding");
    let _ = std::fs::remove_file(&marker);
    let mut holder = Command::new(omnilock)
        .args(["run", "--store", url, "--ttl", "2s"])
        .args(side)
        .args([&name, "--", "sh", "-c"])
        .arg(format!("touch '{}'; exec sleep 600", marker.display()))
        .stdin(Stdio::null())
        .without_terminal()
        .spawn()
        .expect("spawn holder");
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "the holder never got the lock");
        if let Some(status) = holder.try_wait().expect("holder status") {
            panic!("the holder exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    // SIGKILL to the holder and its command at once: no chance to release.
    let group = format!("-{}", holder.id());
    let killed = Command::new("kill")
        .args(["-KILL", "--", &group])
        .status_or_fail("kill");
    assert!(
        killed.success(),
        "could not kill the holder's process group"
    );
    let killed_at = Instant::now();
    holder.wait_or_fail("reap holder");
    let status = Command::new(omnilock)
        .args(["run", "--store", url, "--wait", "30s"])
        .args(side)
        .args([&name, "--", "true"])
        .status_or_fail("run successor");
    let waited = killed_at.elapsed();
    assert!(status.success(), "the successor failed: {status}");
    assert!(
        waited <= ttl + Duration::from_secs(1),
        "the lock freed {waited:?} after the holder was killed (TTL {ttl:?})"
    );
}

/// A holder process paused with SIGSTOP past its TTL: another process gets
/// the lock within TTL + 1 s of the pause; when the holder resumes it reports
/// the loss (exit 70, its release answered "not the owner") and the new
/// holder's lock is untouched.
pub fn paused_holder_loses_lock(omnilock: &Path, url: &str, dir: &Path) {
    paused_holder_loses(omnilock, url, dir, &[]);
}

/// The same for the only permit of a semaphore (`--permits 1`).
pub fn paused_permit_holder_loses_permit(omnilock: &Path, url: &str, dir: &Path) {
    paused_holder_loses(omnilock, url, dir, &["--permits", "1"]);
}

/// A holder of `side` (extra `omnilock run` flags: none for the mutex)
/// paused past its TTL; the successor and the probe take the same side.
fn paused_holder_loses(omnilock: &Path, url: &str, dir: &Path, side: &[&str]) {
    let ttl = Duration::from_secs(2);
    let name = format!("{}/{}", lock_name("paused", dir), side.join(""));
    let held = dir.join("paused-holding");
    let next = dir.join("successor-holding");
    let _ = std::fs::remove_file(&held);
    let _ = std::fs::remove_file(&next);
    let hold = |marker: &Path| {
        Command::new(omnilock)
            .args(["run", "--store", url, "--ttl", "2s", "--wait", "60s"])
            .args(side)
            .args([&name, "--", "sh", "-c"])
            .arg(format!("touch '{}'; exec sleep 600", marker.display()))
            .stdin(Stdio::null())
            .stderr(Stdio::piped())
            .without_terminal()
            .spawn()
            .expect("spawn holder")
    };
    let mut holder = hold(&held);
    wait_for_file(&held, &mut holder, "the first holder");
    signal(&holder, "-STOP", false);
    let paused_at = Instant::now();
    let mut successor = hold(&next);
    wait_for_file(&next, &mut successor, "the successor");
    let waited = paused_at.elapsed();
    signal(&holder, "-CONT", false);
    let status = holder.wait_within("the holder", Duration::from_secs(30));
    let stderr = stderr_of(&mut holder);
    let probe = Command::new(omnilock)
        .args(["run", "--store", url, "--no-wait"])
        .args(side)
        .args([&name, "--", "true"])
        .status_or_fail("probe");
    signal(&successor, "-KILL", true);
    let _ = successor.wait_or_fail("the successor");
    assert!(
        waited <= ttl + Duration::from_secs(1),
        "the successor got the lock {waited:?} after the holder paused (TTL {ttl:?})"
    );
    assert_eq!(
        status.code(),
        Some(70),
        "the resumed holder must exit 70 (lock lost); stderr: {stderr}"
    );
    assert!(
        stderr.contains("lock lost") && stderr.contains("not the owner"),
        "the resumed holder must report the loss and a NotOwner release; stderr: {stderr}"
    );
    assert_eq!(
        probe.code(),
        Some(75),
        "the successor's lock must survive the stale holder's release"
    );
}

/// Kills the process groups of the children it was told of when dropped,
/// so that a scenario that fails half-way leaves no holder running (its
/// children run in groups of their own: `without_terminal`).
#[derive(Default)]
pub(crate) struct KillOnDrop(Vec<u32>);

impl KillOnDrop {
    pub(crate) fn watch(&mut self, child: &std::process::Child) {
        self.0.push(child.id());
    }

    /// Forgets `pid`, reaped: its number may now be another process's.
    pub(crate) fn reaped(&mut self, pid: u32) {
        self.0.retain(|watched| *watched != pid);
    }
}

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        for pid in &self.0 {
            let _ = Command::new("kill")
                .args(["-KILL", "--", &format!("-{pid}")])
                .stderr(Stdio::null())
                .status();
        }
    }
}

/// Starts `omnilock ARGS` with stdout piped, watched by `reaper`, and a
/// thread that sends each line it prints: for the commands that print
/// until interrupted (`watch`, `elect --listen`).
pub(crate) fn printing(
    omnilock: &Path,
    args: &[&str],
    reaper: &mut KillOnDrop,
) -> (std::process::Child, std::sync::mpsc::Receiver<String>) {
    use std::io::BufRead as _;
    let mut child = Command::new(omnilock)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .without_terminal()
        .spawn()
        .expect("spawn omnilock");
    reaper.watch(&child);
    let (tx, lines) = std::sync::mpsc::channel();
    let stdout = child.stdout.take().expect("stdout");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, lines)
}

/// Reads JSON lines from `lines` until one satisfies `wanted`.
pub(crate) fn wait_for_line(
    lines: &std::sync::mpsc::Receiver<String>,
    what: &str,
    wanted: impl Fn(&serde_json::Value) -> bool,
) {
    loop {
        let line = lines
            .recv_timeout(Duration::from_secs(20))
            .unwrap_or_else(|_| panic!("never printed: {what}"));
        let parsed: serde_json::Value =
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line}"));
        if wanted(&parsed) {
            return;
        }
    }
}

/// Starts `omnilock ARGS -- sh -c ...` whose command, once it runs (holds
/// the lock, leads), writes its `$OMNILOCK_TOKEN` to `marker` and sleeps;
/// stderr piped. Read the token with [`token_written`].
pub(crate) fn holding(omnilock: &Path, args: &[&str], marker: &Path) -> std::process::Child {
    let _ = std::fs::remove_file(marker);
    Command::new(omnilock)
        .args(args)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "echo $OMNILOCK_TOKEN > '{m}.tmp'; mv '{m}.tmp' '{m}'; exec sleep 600",
            m = marker.display()
        ))
        .stdin(Stdio::null())
        .stderr(Stdio::piped())
        .without_terminal()
        .spawn()
        .expect("spawn omnilock")
}

/// The token a [`holding`] command wrote, once it runs.
pub(crate) fn token_written(marker: &Path, child: &mut std::process::Child, who: &str) -> u64 {
    wait_for_file(marker, child, who);
    let token = std::fs::read_to_string(marker).expect("token file");
    token
        .trim()
        .parse()
        .unwrap_or_else(|_| panic!("{who} wrote no token: {token:?}"))
}

/// What an exited child (spawned with a piped stderr) wrote on stderr.
pub(crate) fn stderr_of(child: &mut std::process::Child) -> String {
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = std::io::Read::read_to_string(&mut pipe, &mut stderr);
    }
    stderr
}

pub(crate) fn wait_for_file(marker: &Path, child: &mut std::process::Child, who: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while !marker.exists() {
        assert!(Instant::now() < deadline, "{who} never got the lock");
        if let Some(status) = child.try_wait().expect("child status") {
            panic!("{who} exited early: {status}");
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `sig` to the child (or, with `group`, to its whole process group).
pub(crate) fn signal(child: &std::process::Child, sig: &str, group: bool) {
    let target = if group {
        format!("-{}", child.id())
    } else {
        child.id().to_string()
    };
    let sent = Command::new("kill")
        .args([sig, "--", &target])
        .status_or_fail("kill");
    assert!(sent.success(), "kill {sig} {target} failed");
}

/// `omnilock` itself killed with SIGKILL while its command runs: the command
/// and what it started (a shell's own children) are gone within the lease
/// (4 s), so no second holder can start beside them once it runs out; and
/// the next `omnilock run` does get the lock. (The bound is the lease, not
/// less: the callers run this on every store at once, and on 2 loaded CPUs
/// the guardian's wake-up and the kill took over a second.)
pub fn killed_wrapper_takes_its_command_along(omnilock: &Path, url: &str, dir: &Path) {
    let name = lock_name("wrapper", dir);
    let child_pid = dir.join("wrapper-child");
    let grandchild_pid = dir.join("wrapper-grandchild");
    let _ = std::fs::remove_file(&child_pid);
    let _ = std::fs::remove_file(&grandchild_pid);
    // The shell stays (no exec) and starts a grandchild of omnilock.
    let script = format!(
        "echo $$ > '{c}.tmp'; mv '{c}.tmp' '{c}'; sleep 600 & echo $! > '{g}.tmp'; \
         mv '{g}.tmp' '{g}'; wait",
        c = child_pid.display(),
        g = grandchild_pid.display()
    );
    let mut wrapper = Command::new(omnilock)
        .args([
            "run", "--store", url, "--ttl", "4s", &name, "--", "sh", "-c",
        ])
        .arg(script)
        .stdin(Stdio::null())
        .without_terminal()
        .spawn()
        .expect("spawn omnilock");
    wait_for_file(&grandchild_pid, &mut wrapper, "the command");
    let pids: Vec<i32> = [&child_pid, &grandchild_pid]
        .iter()
        .map(|f| {
            std::fs::read_to_string(f)
                .expect("pid file")
                .trim()
                .parse()
                .expect("pid")
        })
        .collect();
    signal(&wrapper, "-KILL", false);
    wrapper.wait_or_fail("reap omnilock");
    let killed_at = Instant::now();
    for pid in &pids {
        while running(*pid) {
            assert!(
                killed_at.elapsed() < Duration::from_secs(4),
                "process {pid} of the command still runs 4 s (the lease) after omnilock was killed"
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }
    let status = Command::new(omnilock)
        .args(["run", "--store", url, "--wait", "30s", &name, "--", "true"])
        .stdin(Stdio::null())
        .status_or_fail("run successor");
    assert!(status.success(), "the successor failed: {status}");
}

/// A fresh, empty directory `<root>/<test>-<pid>` for one test of a
/// command's end-to-end tests (`root`: the test crate's
/// `CARGO_TARGET_TMPDIR` and a folder of the suite's own).
pub fn scratch_dir(root: impl AsRef<Path>, test: &str) -> PathBuf {
    let dir = root.as_ref().join(format!("{test}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("scratch dir");
    dir
}

/// The URL of a private SQLite store in `dir`: the processes of one test
/// share it, no other test does.
pub fn sqlite_store(dir: &Path) -> String {
    format!("sqlite://{}/locks.db", dir.display())
}

/// A process's output, as text.
pub fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Whether `pid` is a live process (a zombie waiting for a reaper that a
/// container's init may never be does not count: it runs nothing).
pub fn running(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(')')
            .map(|(_, rest)| !rest.trim_start().starts_with(['Z', 'X']))
            .unwrap_or(false),
        Err(_) => false,
    }
}

/// Starts a process in a session of its own, with no controlling terminal:
/// as cron or systemd start `omnilock`, whatever terminal the tests run in
/// (with one, `omnilock run` keeps the command in its own job instead).
pub trait WithoutTerminal {
    /// See the trait.
    fn without_terminal(&mut self) -> &mut Self;
}

impl WithoutTerminal for Command {
    fn without_terminal(&mut self) -> &mut Self {
        // SAFETY: setsid and signal between fork and exec are
        // async-signal-safe.
        unsafe {
            self.pre_exec(|| {
                libc::setsid();
                // A test harness started as a background job of a
                // non-interactive shell (`cmd &`) inherits SIGINT and SIGQUIT
                // ignored, and under `nohup` SIGHUP too; omnilock keeps
                // ignored signals ignored, so the signal tests would test
                // the harness. Start from the defaults of every signal the
                // tests send; a test that wants one ignored sets it after.
                for signal in [
                    libc::SIGHUP,
                    libc::SIGINT,
                    libc::SIGQUIT,
                    libc::SIGTERM,
                    libc::SIGUSR1,
                    libc::SIGUSR2,
                ] {
                    libc::signal(signal, libc::SIG_DFL);
                }
                Ok(())
            })
        }
    }
}
