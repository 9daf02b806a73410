//! One ZooKeeper session: a connected client whose session timeout is the
//! lease of every lock node it creates (ephemeral nodes die with it), plus
//! the guards that depend on it.
//!
//! Session states and what guards see:
//! - `SyncConnected`: nodes exist; each guard's safe deadline moves on with
//!   every check that reaches the server (send time + session timeout).
//! - `Disconnected`: the session may still be alive on the server (a client
//!   reconnects within the timeout and keeps its nodes) or may be expiring.
//!   Guards keep reporting held until their safe deadline (last server
//!   contact + session timeout), then fire lost: past that moment the server
//!   may have expired the session and given the lock to someone else.
//! - `Expired` / `Closed` / `AuthFailed` (terminal): every guard fires lost at
//!   once and the next acquisition opens a new session.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use omnilock_core::{
    Error, ErrorKind, LostNotifier, Result, SessionGuards, lock_unpoisoned as lock,
};
use tokio::task::JoinHandle;
use zookeeper_client::{Client, SessionState};

use crate::config::ZkConfig;
use crate::conn::classify;
#[cfg(feature = "tls")]
use crate::tls::{self, Diagnosis, Setup};

/// How long [`Session::end`] waits for the server to confirm the session's
/// end: a reachable server answers within milliseconds; an unreachable one
/// expires the session after its timeout anyway.
const CLOSE_WAIT: Duration = Duration::from_secs(2);

pub(crate) struct Session {
    pub client: Client,
    /// The timeout the server granted (it bounds what clients ask for).
    pub timeout: Duration,
    guards: SessionGuards,
    watcher: Mutex<Option<JoinHandle<()>>>,
}

impl Session {
    /// Connects a new session asking for `timeout`.
    pub(crate) async fn open(config: &ZkConfig, timeout: Duration) -> Result<Arc<Session>> {
        let connector = Client::connector();
        let connector = connector
            .with_session_timeout(timeout)
            .with_connection_timeout((timeout / 3).max(Duration::from_millis(300)));
        let connector = match &config.digest {
            Some((user, pw)) => {
                connector.with_auth("digest", format!("{user}:{}", pw.expose()).as_bytes())
            }
            None => connector,
        };
        let connect_timeout = config.options.connect_timeout;
        let slow = |hint: Option<String>| {
            let hint = hint.map(|hint| format!("; {hint}")).unwrap_or_default();
            Error::unavailable(format!(
                "no ZooKeeper server of {} answered within {connect_timeout:?}{hint}",
                config.shown
            ))
        };
        #[cfg(feature = "tls")]
        if let Some(Setup { options, ca, pem }) = Setup::read(&config.tls)? {
            // The client retries a failed handshake until the timeout and
            // then says only that nobody answered; a handshake of our own
            // beside it says why (see `crate::tls`).
            let connecting = connector.with_tls(options).secure_connect(&config.hosts);
            let diagnosing = tls::diagnose(&config.hosts, &ca, &pem, connect_timeout);
            let deadline = tokio::time::sleep(connect_timeout);
            tokio::pin!(connecting, diagnosing, deadline);
            let (mut hint, mut diagnosed) = (None, false);
            let client = loop {
                tokio::select! {
                    connected = &mut connecting => {
                        break connected.map_err(|e| classify(e, &config.shown))?;
                    }
                    diagnosis = &mut diagnosing, if !diagnosed => {
                        diagnosed = true;
                        match diagnosis {
                            Diagnosis::Refused(e) => return Err(e),
                            Diagnosis::Hint(why) => hint = Some(why),
                            Diagnosis::Fine => {}
                        }
                    }
                    () = &mut deadline => return Err(slow(hint)),
                }
            };
            return Ok(Session::adopt(client));
        }
        let client =
            match tokio::time::timeout(connect_timeout, connector.connect(&config.hosts)).await {
                Ok(Ok(client)) => client,
                Ok(Err(e)) => return Err(classify(e, &config.shown)),
                Err(_) => return Err(slow(None)),
            };
        Ok(Session::adopt(client))
    }

    /// Follows an already connected client's session: one omnilock opened,
    /// or the application's own.
    pub(crate) fn adopt(client: Client) -> Arc<Session> {
        let session = Arc::new(Session {
            timeout: client.session_timeout(),
            client,
            guards: SessionGuards::new(),
            watcher: Mutex::new(None),
        });
        let task = tokio::spawn(watch_states(Arc::downgrade(&session)));
        *lock(&session.watcher) = Some(task);
        session
    }

    /// Why the session is over, if it is.
    pub(crate) fn death(&self) -> Option<Error> {
        self.guards.ended()
    }

    /// Completes with the cause once the session is over.
    pub(crate) async fn died(&self) -> Error {
        self.guards.wait_ended().await
    }

    pub(crate) fn register(&self, lost: &LostNotifier) -> u64 {
        self.guards.register(lost)
    }

    pub(crate) fn unregister(&self, ticket: u64) {
        self.guards.unregister(ticket)
    }

    fn kill(&self, cause: Error) {
        if self.guards.end(cause.clone()) {
            tracing::warn!(error = %cause, "omnilock ZooKeeper session lost");
        }
    }

    /// Marks the session over and, when nothing else uses it, ends it on
    /// the server, waiting (at most [`CLOSE_WAIT`]) for the server to
    /// confirm. The client sends `CloseSession`, which deletes every node
    /// of the session at once, only when its last handle is dropped, from
    /// a task of the runtime: a process that exits right after
    /// `Locks::close` would otherwise leave its nodes (a line entry whose
    /// delete was still under way, say) for a whole session timeout. A
    /// guard still alive keeps its session open until it is dropped.
    pub(crate) async fn end(session: Arc<Session>) {
        session.close();
        let over = matches!(
            session.client.state(),
            SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
        );
        if over || Arc::strong_count(&session) > 1 {
            return;
        }
        let mut states = session.client.state_watcher();
        drop(session);
        let closed = async {
            while !matches!(
                states.changed().await,
                SessionState::Closed | SessionState::Expired | SessionState::AuthFailed
            ) {}
        };
        let _ = tokio::time::timeout(CLOSE_WAIT, closed).await;
    }

    /// Marks the session over; the connection (and with it every ephemeral
    /// node) closes when the last handle to it is dropped: for the
    /// application's own client, when the application drops its handle.
    pub(crate) fn close(&self) {
        if let Some(task) = lock(&self.watcher).take() {
            task.abort();
        }
        self.kill(Error::new(
            ErrorKind::LockLost,
            "the ZooKeeper store was closed",
        ));
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        if let Some(task) = lock(&self.watcher).take() {
            task.abort();
        }
    }
}

/// Follows the session's state; a terminal state kills it.
async fn watch_states(session: std::sync::Weak<Session>) {
    let mut states = match session.upgrade() {
        Some(s) => s.client.state_watcher(),
        None => return,
    };
    loop {
        let state = states.changed().await;
        let Some(s) = session.upgrade() else { return };
        match state {
            SessionState::Expired => {
                s.kill(lost("the ZooKeeper session expired"));
                return;
            }
            SessionState::AuthFailed => {
                s.kill(lost("ZooKeeper refused the session's credentials"));
                return;
            }
            SessionState::Closed => {
                s.kill(lost("the ZooKeeper session was closed"));
                return;
            }
            other => tracing::debug!(state = %other, "omnilock ZooKeeper session state"),
        }
    }
}

fn lost(why: &str) -> Error {
    Error::new(ErrorKind::LockLost, why).with_retryable(true)
}
