//! The command `omnilock run` supervises: it must never outlive the lock's
//! holder.
//!
//! Two modes, chosen by whether `omnilock` has a controlling terminal:
//!
//! - **No terminal** (cron, systemd, CI, `ssh host cmd`, scripts under any of
//!   them): the command runs in a process group of its own. Everything it
//!   starts there (a shell script's children too) is signalled together, the
//!   lock is kept until the whole group has exited (as flock(1) keeps its
//!   lock while any process holding its descriptor lives), and the group is
//!   SIGKILLed if `omnilock` dies without cleaning up (SIGKILL, OOM killer,
//!   crash). That last part is a *guardian*, a small helper process
//!   (`omnilock` itself, started with [`GUARD_ARG`]) holding the read end of
//!   a pipe whose write end only `omnilock` has: when `omnilock` dies, the
//!   kernel closes that end, the guardian reads end-of-file without the
//!   "done" line and kills the group. It sits in a session of its own, so
//!   signals meant for `omnilock`'s job do not reach it.
//! - **A terminal**: the command stays in `omnilock`'s job, so job control
//!   works as for any command (Ctrl-C and Ctrl-Z reach both, `fg` resumes
//!   both, the command may read the terminal). If `omnilock` dies, only the
//!   command itself is killed (below); what it started in the background may
//!   outlive it.
//!
//! In both modes, on Linux the command gets `PR_SET_PDEATHSIG = SIGKILL`: it
//! dies with `omnilock`.
//!
//! What none of this can do: stop the command while `omnilock` is *paused*
//! (SIGSTOP, Ctrl-Z, a frozen VM), or reach processes that leave the group
//! (`setsid`, daemons). The lease then runs out while they still work.
//! Fencing with `$OMNILOCK_TOKEN` is the answer; see the README.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;
use std::time::{Duration, Instant};

use tokio::process::{Child, Command};

/// The hidden first argument that turns `omnilock` into a guardian.
pub(crate) const GUARD_ARG: &str = "__omnilock-guardian";

/// How often the command's process group is looked at once the command
/// itself has exited.
const GROUP_POLL: Duration = Duration::from_millis(50);

/// A running command and, without a terminal, its process group and guardian.
pub(crate) struct Supervised {
    pub child: Child,
    pid: libc::pid_t,
    /// The command's own process group (its pid), without a terminal.
    group: Option<libc::pid_t>,
    guardian: Option<Guardian>,
}

/// The write end of the guardian's pipe, and word of its end.
struct Guardian {
    pipe: std::fs::File,
    /// Set once we dismiss it, so its end is not reported as a death.
    dismissed: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ended: tokio::sync::oneshot::Receiver<()>,
}

/// Starts `program args` under supervision, with `env` added and
/// `OMNILOCK_STORE` (which may carry a password) removed from its
/// environment.
pub(crate) async fn spawn(
    program: &str,
    args: &[String],
    env: &[(&str, String)],
) -> std::io::Result<Supervised> {
    let own_group = !has_controlling_terminal();
    let guardian = own_group.then(start_guardian).and_then(|started| {
        started
            .map_err(|e| eprintln!("omnilock: warning: {e}"))
            .ok()
    });

    let parent = std::process::id() as libc::pid_t;
    let mut command = Command::new(program);
    command.args(args).env_remove("OMNILOCK_STORE");
    for (key, value) in env {
        command.env(key, value);
    }
    // SAFETY: the closure runs between fork and exec and calls only
    // async-signal-safe functions (setpgid, prctl, getppid, kill, getpid).
    unsafe {
        command.as_std_mut().pre_exec(move || {
            if own_group && libc::setpgid(0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            #[cfg(target_os = "linux")]
            {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                // omnilock died before the prctl: die now, not later.
                if libc::getppid() != parent {
                    libc::kill(libc::getpid(), libc::SIGKILL);
                }
            }
            #[cfg(not(target_os = "linux"))]
            let _ = parent;
            Ok(())
        });
    }
    let child = match command.spawn() {
        Ok(child) => child,
        Err(err) => {
            // Nothing to guard: a guardian left running would report its
            // end as a failure beside the real one (command not found).
            if let Some(guardian) = guardian {
                guardian.dismiss().await;
            }
            return Err(err);
        }
    };
    let pid = child.id().map(|id| id as libc::pid_t).unwrap_or(0);
    let group = (own_group && pid > 0).then_some(pid);
    if let Some(pgid) = group {
        // Also from this side, so the group exists before we signal it.
        // SAFETY: setpgid on a child we spawned; failing because it has
        // already exec'd (and set it itself) is harmless.
        unsafe {
            libc::setpgid(pgid, pgid);
        }
    }
    let mut supervised = Supervised {
        child,
        pid,
        group,
        guardian,
    };
    supervised.tell_guardian();
    Ok(supervised)
}

impl Supervised {
    /// Whether the command runs in a process group of its own.
    pub(crate) fn own_group(&self) -> bool {
        self.group.is_some()
    }

    /// Sends `signal` to the command's group, or to the command alone when
    /// it shares `omnilock`'s job.
    pub(crate) fn signal(&self, signal: i32) {
        let target = self.group.map_or(self.pid, |pgid| -pgid);
        if target != 0 {
            // SAFETY: kill(2) on a child (or its group) we have not reaped.
            unsafe {
                libc::kill(target, signal);
            }
        }
    }

    /// The command's own process group, if it has one.
    pub(crate) fn group(&self) -> Option<libc::pid_t> {
        self.group
    }

    /// SIGTERM to the command (its whole group), SIGKILL to what is left
    /// after `grace`; returns once nothing of it runs.
    pub(crate) async fn stop(&mut self, grace: Duration) {
        self.signal(libc::SIGTERM);
        let deadline = Instant::now() + grace;
        let ended = tokio::time::timeout(grace, self.child.wait()).await.is_ok();
        let left = deadline.saturating_duration_since(Instant::now());
        if !ended
            || tokio::time::timeout(left, emptied(self.group))
                .await
                .is_err()
        {
            self.signal(libc::SIGKILL);
        }
        let _ = self.child.wait().await;
        let _ = tokio::time::timeout(Duration::from_secs(5), emptied(self.group)).await;
    }

    /// The command and its group have ended: dismiss the guardian without
    /// letting it kill anything.
    pub(crate) async fn finish(mut self) {
        if let Some(guardian) = self.guardian.take() {
            guardian.dismiss().await;
        }
    }

    fn tell_guardian(&mut self) {
        if let (Some(guardian), Some(pgid)) = (self.guardian.as_mut(), self.group) {
            let _ = writeln!(guardian.pipe, "group {pgid}");
        }
    }
}

/// Resolves once no live process is left in group `group` (at once for
/// none). Call after the command itself exited.
pub(crate) async fn emptied(group: Option<libc::pid_t>) {
    let Some(pgid) = group else { return };
    while group_alive(pgid) {
        tokio::time::sleep(GROUP_POLL).await;
    }
}

/// Whether this process has a controlling terminal (a job-control shell,
/// `ssh -t`, `script`): then the command stays in our job.
fn has_controlling_terminal() -> bool {
    // SAFETY: open/close of /dev/tty; O_NOCTTY so it never becomes one.
    unsafe {
        let fd = libc::open(
            c"/dev/tty".as_ptr(),
            libc::O_RDWR | libc::O_NOCTTY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return false;
        }
        libc::close(fd);
        true
    }
}

/// Whether any process of group `pgid` still runs (zombies do not: a
/// container's init may never reap them, and they run nothing).
fn group_alive(pgid: libc::pid_t) -> bool {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        // No procfs: ask the kernel (zombies then count as alive).
        // SAFETY: kill with signal 0 only checks for existence.
        return unsafe { libc::kill(-pgid, 0) } == 0;
    };
    entries.flatten().any(|entry| {
        let name = entry.file_name();
        let Some(pid) = name
            .to_str()
            .filter(|n| n.bytes().all(|b| b.is_ascii_digit()))
        else {
            return false;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            return false;
        };
        // "pid (comm) state ppid pgrp ...": comm may hold spaces and ')'.
        let Some((_, rest)) = stat.rsplit_once(')') else {
            return false;
        };
        let mut fields = rest.split_whitespace();
        let state = fields.next().unwrap_or("Z");
        let pgrp = fields.nth(1).and_then(|p| p.parse::<libc::pid_t>().ok());
        pgrp == Some(pgid) && !state.starts_with(['Z', 'X'])
    })
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: pipe2 fills both descriptors on success; we own them after.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: fresh descriptors from pipe2, owned by nobody else.
    Ok(unsafe {
        use std::os::fd::FromRawFd;
        (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))
    })
}

impl Guardian {
    /// Tells the guardian its work is over (it exits without killing
    /// anything) and waits a moment for it to go.
    async fn dismiss(mut self) {
        self.dismissed
            .store(true, std::sync::atomic::Ordering::SeqCst);
        let _ = writeln!(self.pipe, "done");
        drop(self.pipe);
        let _ = tokio::time::timeout(Duration::from_secs(1), self.ended).await;
    }
}

fn start_guardian() -> Result<Guardian, String> {
    let unguarded = |e: std::io::Error| {
        format!(
            "cannot start the guardian process ({e}): if omnilock is killed, \
             what the command started may outlive it"
        )
    };
    let (read, write) = pipe().map_err(unguarded)?;
    // /proc/self/exe still works after the binary was replaced on disk (an
    // upgrade during a long wait); current_exe() would name the new file or
    // a "(deleted)" path.
    let exe = std::path::Path::new("/proc/self/exe");
    let exe = if exe.exists() {
        exe.to_path_buf()
    } else {
        std::env::current_exe().map_err(unguarded)?
    };
    let mut command = Command::new(exe);
    command
        .arg(GUARD_ARG)
        .stdin(Stdio::from(read))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .env_remove("OMNILOCK_STORE")
        .kill_on_drop(false);
    // SAFETY: setsid between fork and exec is async-signal-safe.
    unsafe {
        command.as_std_mut().pre_exec(|| {
            libc::setsid();
            Ok(())
        });
    }
    let mut process = command.spawn().map_err(unguarded)?;
    let dismissed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (end_tx, ended) = tokio::sync::oneshot::channel();
    let watching = dismissed.clone();
    tokio::spawn(async move {
        let status = process.wait().await;
        if !watching.load(std::sync::atomic::Ordering::SeqCst) {
            let how = match status {
                Ok(status) => status.to_string(),
                Err(err) => err.to_string(),
            };
            eprintln!(
                "omnilock: warning: the guardian process ended ({how}): if omnilock \
                 is killed now, what the command started may outlive it"
            );
        }
        let _ = end_tx.send(());
    });
    Ok(Guardian {
        pipe: std::fs::File::from(write),
        dismissed,
        ended,
    })
}

/// The guardian's whole life: wait for `omnilock` to finish or die, and
/// SIGKILL the command's group if it died.
pub(crate) fn guardian_main() -> u8 {
    // SAFETY: plain signal dispositions in a single-threaded process.
    unsafe {
        for signal in [
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
            libc::SIGPIPE,
            libc::SIGUSR1,
            libc::SIGUSR2,
        ] {
            libc::signal(signal, libc::SIG_IGN);
        }
    }
    let stdin = std::io::stdin();
    // Only ever fed by `omnilock run` through a pipe.
    // SAFETY: fstat on our own stdin into a zeroed struct.
    let is_pipe = unsafe {
        let mut stat: libc::stat = std::mem::zeroed();
        libc::fstat(stdin.as_raw_fd(), &mut stat) == 0
            && (stat.st_mode & libc::S_IFMT) == libc::S_IFIFO
    };
    if !is_pipe {
        eprintln!("omnilock: {GUARD_ARG} is internal to `omnilock run`");
        return crate::exit::USAGE;
    }
    let mut said = String::new();
    let _ = stdin.lock().read_to_string(&mut said);
    let mut group = None;
    for line in said.lines() {
        if line == "done" {
            return 0;
        }
        if let Some(pgid) = line.strip_prefix("group ") {
            group = pgid.parse::<libc::pid_t>().ok().filter(|p| *p > 1);
        }
    }
    if let Some(pgid) = group {
        // SAFETY: kill(2) of the group omnilock told us about.
        unsafe {
            libc::kill(-pgid, libc::SIGKILL);
        }
    }
    0
}
