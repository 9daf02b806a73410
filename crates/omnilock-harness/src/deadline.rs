//! Waiting on a process a test started, with a deadline: a process that
//! never ends (a signal that never arrived, a lock never granted) fails the
//! test with a message naming it, instead of hanging the test run.

use std::process::{Child, Command, ExitStatus, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// How long a test waits for a process it started: far beyond any
/// scenario's own length (the longest waits a minute for a lock).
pub const PROCESS_DEADLINE: Duration = Duration::from_secs(180);

/// A started process, waited for with [`PROCESS_DEADLINE`].
pub trait WaitBounded {
    /// Waits for the process to exit. Past the deadline, kills it (with its
    /// process group, if it leads one) and panics naming `who`.
    fn wait_or_fail(&mut self, who: &str) -> ExitStatus;

    /// [`wait_or_fail`](Self::wait_or_fail) with the deadline `limit`.
    fn wait_within(&mut self, who: &str, limit: Duration) -> ExitStatus;

    /// [`Child::wait_with_output`], with the deadline.
    fn output_or_fail(self, who: &str) -> Output;

    /// [`Child::wait_with_output`], with the deadline `limit` (a process
    /// that itself waits on others with [`PROCESS_DEADLINE`] needs longer,
    /// so that their failure, not its, is what the test reports).
    fn output_within(self, who: &str, limit: Duration) -> Output;
}

impl WaitBounded for Child {
    fn wait_or_fail(&mut self, who: &str) -> ExitStatus {
        self.wait_within(who, PROCESS_DEADLINE)
    }

    fn wait_within(&mut self, who: &str, limit: Duration) -> ExitStatus {
        let deadline = Instant::now() + limit;
        loop {
            match self.try_wait() {
                Ok(Some(status)) => return status,
                Ok(None) if Instant::now() < deadline => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                Ok(None) => {
                    kill(self.id());
                    let _ = self.wait();
                    panic!("{who}: still running after {limit:?}; killed");
                }
                Err(err) => panic!("{who}: cannot wait: {err}"),
            }
        }
    }

    fn output_or_fail(self, who: &str) -> Output {
        self.output_within(who, PROCESS_DEADLINE)
    }

    fn output_within(self, who: &str, limit: Duration) -> Output {
        let pid = self.id();
        let (done, finished) = mpsc::channel();
        // The pipes are read to their end where wait_with_output reads
        // them; this thread only waits for that.
        std::thread::spawn(move || {
            let _ = done.send(self.wait_with_output());
        });
        match finished.recv_timeout(limit) {
            Ok(Ok(output)) => output,
            Ok(Err(err)) => panic!("{who}: cannot wait: {err}"),
            Err(_) => {
                kill(pid);
                panic!("{who}: still running after {limit:?}; killed");
            }
        }
    }
}

/// A command, run to its end with [`PROCESS_DEADLINE`].
pub trait RunBounded {
    /// [`Command::output`] (its standard output and error captured), with
    /// the deadline.
    fn output_or_fail(&mut self, who: &str) -> Output;

    /// [`Command::status`] (standard output and error inherited), with the
    /// deadline.
    fn status_or_fail(&mut self, who: &str) -> ExitStatus;
}

impl RunBounded for Command {
    fn output_or_fail(&mut self, who: &str) -> Output {
        let child = self
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|err| panic!("{who}: cannot start: {err}"));
        child.output_or_fail(who)
    }

    fn status_or_fail(&mut self, who: &str) -> ExitStatus {
        self.spawn()
            .unwrap_or_else(|err| panic!("{who}: cannot start: {err}"))
            .wait_or_fail(who)
    }
}

/// SIGKILL to `pid`'s process group (a process started in a session of its
/// own leads one) and to `pid` itself.
fn kill(pid: u32) {
    let pid = pid as libc::pid_t;
    // SAFETY: kill(2) on a process this test started; a stale ID only fails.
    unsafe {
        if libc::getpgid(pid) == pid {
            libc::kill(-pid, libc::SIGKILL);
        }
        libc::kill(pid, libc::SIGKILL);
    }
}
