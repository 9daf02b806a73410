//! One error type for every backend: a portable [`ErrorKind`], where it
//! happened (backend, operation, lock), whether retrying can help, and the cause.

use std::fmt;
use std::sync::Arc;

/// What went wrong, independent of the store.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The lock name breaks the naming rules (see [`crate::LockName`]).
    InvalidName,
    /// A URL, option, duration or owner is malformed or unsupported.
    InvalidConfig,
    /// A waiting acquire did not get the lock within its timeout.
    Timeout,
    /// The caller does not own the lock it tried to release or extend.
    NotOwner,
    /// The lock was held but is not any more (lease expired, revoked, session lost).
    LockLost,
    /// The store cannot be reached or did not answer in time.
    Unavailable,
    /// The backend cannot do what was asked (see [`crate::Capabilities`]).
    Unsupported,
    /// Waiting would never end: a non-reentrant acquire by the owner that
    /// already holds the lock, or a SQL lock taken inside a transaction
    /// that already holds up the lock's holder (`SqlStore::lock_in`).
    WouldDeadlock,
    /// The store refused the credentials (a wrong or rotated password, an
    /// unknown user) or denied this user the lock's keys, nodes or tables.
    /// Not retryable: the same credentials get the same answer.
    Auth,
    /// The TLS handshake failed for good: the server's certificate does not
    /// verify against the CA given (or names another host), the client's
    /// certificate is refused, or the server offers no TLS where the URL
    /// requires it. Not retryable.
    Tls,
    /// The request contradicts what the lock's other users declared: a
    /// semaphore asked for with another number of permits than the one it
    /// is in use with, or a guarded write to a key that holds another type
    /// of value. Nothing changed; every user must ask alike.
    Conflict,
    /// A fenced write carried a fencing token lower than one the resource
    /// has already accepted: a later holder took the lock and wrote since,
    /// so this holder's lock is gone. Nothing was written, and retrying with
    /// the same token gets the same answer (see [`Error::tokens`]).
    StaleToken,
    /// The store answered with an error omnilock does not classify further.
    Backend,
}

impl ErrorKind {
    /// A short stable name in `snake_case`, safe as a metric label or a
    /// JSON value (`"invalid_name"`, `"unavailable"`, ...).
    ///
    /// ```
    /// use omnilock_core::ErrorKind;
    /// assert_eq!(ErrorKind::WouldDeadlock.as_str(), "would_deadlock");
    /// assert_eq!(ErrorKind::WouldDeadlock.to_string(), "would deadlock");
    /// ```
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid_name",
            ErrorKind::InvalidConfig => "invalid_config",
            ErrorKind::Timeout => "timeout",
            ErrorKind::NotOwner => "not_owner",
            ErrorKind::LockLost => "lock_lost",
            ErrorKind::Unavailable => "unavailable",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::WouldDeadlock => "would_deadlock",
            ErrorKind::Auth => "auth",
            ErrorKind::Tls => "tls",
            ErrorKind::Conflict => "conflict",
            ErrorKind::StaleToken => "stale_token",
            ErrorKind::Backend => "backend",
        }
    }

    /// The kind in words, as messages show it (its `Display`).
    fn phrase(self) -> &'static str {
        match self {
            ErrorKind::InvalidName => "invalid lock name",
            ErrorKind::InvalidConfig => "invalid configuration",
            ErrorKind::Timeout => "timed out",
            ErrorKind::NotOwner => "not the owner",
            ErrorKind::LockLost => "lock lost",
            ErrorKind::Unavailable => "store unavailable",
            ErrorKind::Unsupported => "unsupported",
            ErrorKind::WouldDeadlock => "would deadlock",
            ErrorKind::Auth => "access refused",
            ErrorKind::Tls => "TLS failed",
            ErrorKind::Conflict => "conflict",
            ErrorKind::StaleToken => "stale fencing token",
            ErrorKind::Backend => "backend error",
        }
    }

    /// Whether an operation failing with this kind may succeed if tried again.
    fn default_retryable(self) -> bool {
        matches!(self, ErrorKind::Unavailable | ErrorKind::Timeout)
    }
}

impl fmt::Display for ErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.phrase())
    }
}

/// The lock operation during which an error happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Operation {
    /// Parsing a URL or options, or opening the connection.
    Connect,
    /// A waiting acquire.
    Acquire,
    /// A try-acquire that never waits.
    TryAcquire,
    /// Releasing a held lock.
    Release,
    /// Extending a held lock's lease.
    Renew,
    /// Forcibly removing a lock whatever its owner.
    BreakLock,
    /// Reading a lock's holders and waiters.
    Inspect,
    /// Listing the held locks under a prefix.
    List,
}

impl Operation {
    /// A short stable name, used in messages and logs.
    pub fn as_str(self) -> &'static str {
        match self {
            Operation::Connect => "connect",
            Operation::Acquire => "acquire",
            Operation::TryAcquire => "try_acquire",
            Operation::Release => "release",
            Operation::Renew => "renew",
            Operation::BreakLock => "break_lock",
            Operation::Inspect => "inspect",
            Operation::List => "list",
        }
    }
}

/// The result type of every omnilock operation.
pub type Result<T, E = Error> = std::result::Result<T, E>;

type Cause = Arc<dyn std::error::Error + Send + Sync + 'static>;

/// An omnilock error.
///
/// Messages never contain passwords: URLs are shown redacted (see
/// [`crate::StoreUrl`]) and backends must not copy credentials into messages.
///
/// ```
/// use omnilock_core::{Error, ErrorKind, Operation};
/// let err = Error::new(ErrorKind::Unavailable, "connection refused")
///     .with_backend("redis")
///     .with_operation(Operation::Acquire)
///     .with_lock("jobs/nightly");
/// assert!(err.is_retryable());
/// assert_eq!(
///     err.to_string(),
///     "store unavailable: connection refused (backend redis, acquire, lock \"jobs/nightly\")"
/// );
/// ```
#[derive(Clone)]
pub struct Error {
    kind: ErrorKind,
    message: String,
    backend: Option<&'static str>,
    operation: Option<Operation>,
    lock: Option<String>,
    retryable: bool,
    cause: Option<Cause>,
    /// A `StaleToken` error's tokens: the one offered, the highest seen.
    tokens: Option<(u64, u64)>,
}

impl Error {
    /// A new error of `kind`; retryable by default for `Unavailable` and `Timeout`.
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            message: message.into(),
            backend: None,
            operation: None,
            lock: None,
            retryable: kind.default_retryable(),
            cause: None,
            tokens: None,
        }
    }

    /// Shorthand for [`ErrorKind::InvalidConfig`].
    pub fn config(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::InvalidConfig, message)
    }

    /// Shorthand for [`ErrorKind::Unavailable`] (retryable).
    pub fn unavailable(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Unavailable, message)
    }

    /// Shorthand for [`ErrorKind::Auth`].
    pub fn auth(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Auth, message)
    }

    /// Shorthand for [`ErrorKind::Tls`].
    pub fn tls(message: impl Into<String>) -> Self {
        Error::new(ErrorKind::Tls, message)
    }

    /// The `Conflict` answer to a semaphore asked for with `asked` permits
    /// while it is in use with `recorded`; every backend uses it so users
    /// see one message.
    pub fn permits_conflict(recorded: u64, asked: u64) -> Self {
        Error::new(
            ErrorKind::Conflict,
            format!(
                "the semaphore is in use with {recorded} permits, not {asked}: every user \
                 must ask for the same number"
            ),
        )
    }

    /// The `StaleToken` answer of a fenced resource to a write with token
    /// `offered` after one with the higher token `highest`.
    ///
    /// ```
    /// use omnilock_core::{Error, ErrorKind};
    /// let err = Error::stale_token(7, 9);
    /// assert_eq!(err.kind(), ErrorKind::StaleToken);
    /// assert_eq!(err.tokens(), Some((7, 9)));
    /// assert!(!err.is_retryable());
    /// ```
    pub fn stale_token(offered: u64, highest: u64) -> Self {
        let mut err = Error::new(
            ErrorKind::StaleToken,
            format!(
                "fencing token {offered} is older than {highest}: the lock was lost and \
                 taken over since, so nothing was written"
            ),
        );
        err.tokens = Some((offered, highest));
        err
    }

    /// For a [`ErrorKind::StaleToken`] error, the token the refused write
    /// carried and the highest the resource had accepted before, in that
    /// order.
    pub fn tokens(&self) -> Option<(u64, u64)> {
        self.tokens
    }

    /// The `NotOwner` answer to a release by someone who no longer holds the
    /// lock; every backend uses it so users see one message.
    pub fn not_owner() -> Self {
        Error::new(
            ErrorKind::NotOwner,
            "the lock is not held by this owner (its lease expired or it was taken over)",
        )
    }

    /// The `WouldDeadlock` answer to a non-reentrant re-acquire by the holder.
    pub fn would_deadlock() -> Self {
        Error::new(
            ErrorKind::WouldDeadlock,
            "this owner already holds the lock and the acquisition is not reentrant",
        )
    }

    /// Names the backend (`"mem"`, `"redis"`, ...), unless one is already set.
    pub fn with_backend(mut self, backend: &'static str) -> Self {
        self.backend.get_or_insert(backend);
        self
    }

    /// Names the operation, unless one is already set.
    pub fn with_operation(mut self, operation: Operation) -> Self {
        self.operation.get_or_insert(operation);
        self
    }

    /// Names the lock, unless one is already set.
    pub fn with_lock(mut self, lock: impl Into<String>) -> Self {
        if self.lock.is_none() {
            self.lock = Some(lock.into());
        }
        self
    }

    /// Attaches the underlying error.
    pub fn with_cause(mut self, cause: impl std::error::Error + Send + Sync + 'static) -> Self {
        self.cause = Some(Arc::new(cause));
        self
    }

    /// Overrides whether retrying can help.
    pub fn with_retryable(mut self, retryable: bool) -> Self {
        self.retryable = retryable;
        self
    }

    /// The portable kind.
    pub fn kind(&self) -> ErrorKind {
        self.kind
    }

    /// The human message, without context.
    pub fn message(&self) -> &str {
        &self.message
    }

    /// The backend that raised the error, if known.
    pub fn backend(&self) -> Option<&'static str> {
        self.backend
    }

    /// The operation that failed, if known.
    pub fn operation(&self) -> Option<Operation> {
        self.operation
    }

    /// The lock name involved, if any.
    pub fn lock(&self) -> Option<&str> {
        self.lock.as_deref()
    }

    /// Whether the same operation may succeed if tried again.
    pub fn is_retryable(&self) -> bool {
        self.retryable
    }

    /// This error as the reason a held lock was lost: kind
    /// [`ErrorKind::LockLost`] (not retryable), the same backend, operation
    /// and lock, and this error itself as the source, kind and cause intact
    /// (see [`underlying`](Self::underlying)). A `LockLost` error is
    /// returned as it is.
    pub fn into_lock_lost(self) -> Error {
        if self.kind == ErrorKind::LockLost {
            return self;
        }
        Error {
            kind: ErrorKind::LockLost,
            message: format!("{} while the lock was held", self.kind),
            backend: self.backend,
            operation: self.operation,
            lock: self.lock.clone(),
            retryable: false,
            tokens: None,
            cause: Some(Arc::new(self)),
        }
    }

    /// The omnilock error this one wraps, if its cause is one: for a loss
    /// made by [`into_lock_lost`](Self::into_lock_lost), the failure that
    /// lost the lock.
    pub fn underlying(&self) -> Option<&Error> {
        self.cause.as_deref()?.downcast_ref()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.kind, self.message)?;
        let mut context = Vec::new();
        if let Some(backend) = self.backend {
            context.push(format!("backend {backend}"));
        }
        if let Some(operation) = self.operation {
            context.push(operation.as_str().to_string());
        }
        if let Some(lock) = &self.lock {
            context.push(format!("lock {lock:?}"));
        }
        if !context.is_empty() {
            write!(f, " ({})", context.join(", "))?;
        }
        // The cause is `source()`'s: shown by `{:#}` only, so that a report
        // that walks the chain (anyhow's `{:#}`) shows each cause once.
        if f.alternate() {
            let mut cause = std::error::Error::source(self);
            while let Some(error) = cause {
                write!(f, ": {error}")?;
                cause = error.source();
            }
        }
        Ok(())
    }
}

impl fmt::Debug for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Error")
            .field("kind", &self.kind)
            .field("message", &self.message)
            .field("backend", &self.backend)
            .field("operation", &self.operation)
            .field("lock", &self.lock)
            .field("retryable", &self.retryable)
            .field("cause", &self.cause.as_ref().map(|c| c.to_string()))
            .field("tokens", &self.tokens)
            .finish()
    }
}

impl std::error::Error for Error {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        self.cause
            .as_deref()
            .map(|c| c as &(dyn std::error::Error + 'static))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn context_is_set_once() {
        let err = Error::new(ErrorKind::NotOwner, "held by someone else")
            .with_backend("mem")
            .with_backend("redis")
            .with_lock("a")
            .with_lock("b");
        assert_eq!(err.backend(), Some("mem"));
        assert_eq!(err.lock(), Some("a"));
        assert!(!err.is_retryable());
    }

    #[test]
    fn a_loss_keeps_the_failure_that_caused_it() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionReset, "reset");
        let failure = Error::new(ErrorKind::Backend, "NOSCRIPT")
            .with_backend("redis")
            .with_operation(Operation::Renew)
            .with_cause(io);
        let loss = failure.into_lock_lost().with_lock("jobs/a");
        assert_eq!(loss.kind(), ErrorKind::LockLost);
        assert!(!loss.is_retryable());
        assert_eq!(loss.backend(), Some("redis"));
        assert_eq!(loss.operation(), Some(Operation::Renew));
        let original = loss.underlying().expect("the original error");
        assert_eq!(original.kind(), ErrorKind::Backend);
        assert_eq!(original.message(), "NOSCRIPT");
        let io = std::error::Error::source(original).expect("its own cause");
        assert_eq!(io.to_string(), "reset");
        let lost = Error::new(ErrorKind::LockLost, "lease expired");
        assert_eq!(lost.clone().into_lock_lost().message(), "lease expired");
        assert!(lost.underlying().is_none());
    }

    /// `Display` shows the error itself; the cause is `source()`, and `{:#}`
    /// adds the whole chain, each cause once.
    #[test]
    fn cause_is_chained_not_repeated() {
        let io = std::io::Error::new(std::io::ErrorKind::ConnectionRefused, "refused");
        let err = Error::unavailable("cannot connect").with_cause(io);
        assert_eq!(err.to_string(), "store unavailable: cannot connect");
        assert_eq!(
            std::error::Error::source(&err).map(|c| c.to_string()),
            Some("refused".to_string())
        );
        assert_eq!(
            format!("{err:#}"),
            "store unavailable: cannot connect: refused"
        );
        let lost = err.into_lock_lost();
        assert_eq!(
            format!("{lost:#}"),
            "lock lost: store unavailable while the lock was held: \
             store unavailable: cannot connect: refused"
        );
    }

    /// Every kind's label is `snake_case`, and distinct.
    #[test]
    fn kind_labels_are_label_safe() {
        let kinds = [
            ErrorKind::InvalidName,
            ErrorKind::InvalidConfig,
            ErrorKind::Timeout,
            ErrorKind::NotOwner,
            ErrorKind::LockLost,
            ErrorKind::Unavailable,
            ErrorKind::Unsupported,
            ErrorKind::WouldDeadlock,
            ErrorKind::Auth,
            ErrorKind::Tls,
            ErrorKind::Conflict,
            ErrorKind::StaleToken,
            ErrorKind::Backend,
        ];
        let labels: std::collections::BTreeSet<&str> = kinds.iter().map(|k| k.as_str()).collect();
        assert_eq!(labels.len(), kinds.len());
        for label in labels {
            assert!(
                label.chars().all(|c| c.is_ascii_lowercase() || c == '_'),
                "{label}"
            );
        }
    }
}
