//! The command `omnilock run` supervises: it must never outlive the lock's
//! holder.
//!
//! The command runs in a process group of its own, so that everything it
//! starts (a shell script's own children too) can be signalled at once. Two
//! mechanisms stop that group when `omnilock` dies without cleaning up
//! (SIGKILL, OOM killer, crash):
//!
//! - on Linux the command gets `PR_SET_PDEATHSIG = SIGKILL`: it dies with the
//!   thread that spawned it;
//! - a *guardian*, a small helper process (`omnilock` itself, started with
//!   [`GUARD_ARG`]), holds the read end of a pipe whose write end only
//!   `omnilock` has. When `omnilock` dies, the kernel closes that end; the
//!   guardian reads end-of-file without the "done" line and SIGKILLs the
//!   whole group. It sits in a session of its own, so terminal signals do not
//!   reach it.
//!
//! What neither can do: stop the command while `omnilock` is *paused*
//! (SIGSTOP, a frozen VM). The lease then runs out while the command still
//! works. Fencing with `$OMNILOCK_TOKEN` is the answer; see the README.
//!
//! When `omnilock` runs in the foreground of a terminal, the command's group
//! gets the terminal while it runs (as a shell does for a job), so
//! interactive commands still read from it and Ctrl-C reaches them directly.

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::process::CommandExt as _;
use std::process::Stdio;

use tokio::process::{Child, Command};

/// The hidden first argument that turns `omnilock` into a guardian.
pub const GUARD_ARG: &str = "__omnilock-guardian";

/// A running command, its process group and its guardian.
pub struct Supervised {
    pub child: Child,
    /// The command's process group id (its pid).
    pgid: libc::pid_t,
    /// The write end of the guardian's pipe; closed without "done" on death.
    guardian: Option<std::fs::File>,
    guardian_process: Option<Child>,
    /// The terminal whose foreground group we handed to the command.
    terminal: Option<libc::c_int>,
}

/// Starts `program args` under supervision, with `env` added and
/// `OMNILOCK_STORE` (which may carry a password) removed from its
/// environment.
pub fn spawn(
    program: &str,
    args: &[String],
    env: &[(&str, String)],
) -> std::io::Result<Supervised> {
    let (guard_read, guard_write) = pipe()?;
    let guardian_process = spawn_guardian(guard_read).ok();
    let guardian = guardian_process
        .as_ref()
        .map(|_| std::fs::File::from(guard_write));

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
            if libc::setpgid(0, 0) != 0 {
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
    let child = command.spawn()?;
    let pgid = child.id().map(|id| id as libc::pid_t).unwrap_or(0);
    // Also from this side, so the group exists before we signal it.
    // SAFETY: setpgid on a child we spawned; failure (it already exec'd and
    // set it itself) is harmless.
    unsafe {
        libc::setpgid(pgid, pgid);
    }
    let mut supervised = Supervised {
        child,
        pgid,
        guardian,
        guardian_process,
        terminal: None,
    };
    if let Some(file) = supervised.guardian.as_mut() {
        let _ = writeln!(file, "group {pgid}");
    }
    supervised.terminal = hand_terminal_to(pgid);
    Ok(supervised)
}

impl Supervised {
    /// Sends `signal` to the command's whole process group.
    pub fn signal(&self, signal: i32) {
        if self.pgid > 0 {
            // SAFETY: kill(2) on the group of a child we have not reaped.
            unsafe {
                libc::kill(-self.pgid, signal);
            }
        }
    }

    /// SIGTERM to the group, then SIGKILL after `grace`.
    pub async fn stop(&mut self, grace: std::time::Duration) {
        self.signal(libc::SIGTERM);
        if tokio::time::timeout(grace, self.child.wait())
            .await
            .is_err()
        {
            self.signal(libc::SIGKILL);
            let _ = self.child.wait().await;
        }
    }

    /// The command has ended: take the terminal back and dismiss the
    /// guardian without letting it kill anything (what the command left
    /// running in the background is its own business, as with flock(1)).
    pub async fn finish(mut self) {
        if let Some(fd) = self.terminal.take() {
            take_terminal_back(fd);
        }
        if let Some(mut file) = self.guardian.take() {
            let _ = writeln!(file, "done");
        }
        if let Some(mut guardian) = self.guardian_process.take() {
            let _ = tokio::time::timeout(std::time::Duration::from_secs(1), guardian.wait()).await;
        }
    }
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

fn spawn_guardian(read: OwnedFd) -> std::io::Result<Child> {
    let exe = std::env::current_exe()?;
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
    command.spawn()
}

/// The guardian's whole life: wait for `omnilock` to finish or die, and
/// SIGKILL the command's group if it died.
pub fn guardian_main() -> u8 {
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

/// When this process is in the foreground of the terminal on stdin, makes
/// `pgid` the foreground group and returns the terminal's descriptor.
fn hand_terminal_to(pgid: libc::pid_t) -> Option<libc::c_int> {
    let fd = libc::STDIN_FILENO;
    // SAFETY: isatty/tcgetpgrp/getpgrp/tcsetpgrp on our own stdin.
    unsafe {
        if pgid <= 0 || libc::isatty(fd) != 1 || libc::tcgetpgrp(fd) != libc::getpgrp() {
            return None;
        }
        (libc::tcsetpgrp(fd, pgid) == 0).then_some(fd)
    }
}

/// Makes this process's group the terminal's foreground group again.
fn take_terminal_back(fd: libc::c_int) {
    // SAFETY: as a background group now, tcsetpgrp would stop us with
    // SIGTTOU unless it is ignored for the call.
    unsafe {
        let previous = libc::signal(libc::SIGTTOU, libc::SIG_IGN);
        libc::tcsetpgrp(fd, libc::getpgrp());
        libc::signal(libc::SIGTTOU, previous);
    }
}
