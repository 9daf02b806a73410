//! [`AcquireOptions`]: the options of an acquisition (TTL, owner,
//! reentrancy, timeout, a "now waiting" callback), built once and applied
//! to any request; and the macro that writes the same setters on every
//! request builder, async and blocking.

use std::time::Duration;

use crate::client::check_ttl;
use crate::error::{Error, Result};
use crate::name::Owner;
use crate::signal::WaitNotice;

/// The text of each option's setter, written once for [`AcquireOptions`]
/// and every request builder (see [`option_setters!`]).
#[doc(hidden)]
#[macro_export]
macro_rules! option_doc {
    (ttl) => {
        "The lease TTL: the store frees the lock this long after its holder \
         stops renewing it (a dead holder is replaced that much later). The \
         default is the handle's TTL. The acquisition refuses one outside \
         [`MIN_TTL`](crate::MIN_TTL) to [`MAX_TTL`](crate::MAX_TTL) with \
         [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), \
         before any I/O."
    };
    (owner) => {
        "Acquires as `owner` (see [`Owner`](crate::Owner)) instead of the \
         request's default owner (`host:pid:random`): acquisitions of one \
         owner re-enter each other's locks in this process. The owner is \
         what operators see as the holder, so a label that names the job \
         and the machine (`backup@db-3`) tells them who holds it."
    };
    (reentrant) => {
        "Whether the owner may re-enter a lock it holds (default: the \
         handle's, normally yes). When not, a re-acquire by the holder fails \
         at once with [`ErrorKind::WouldDeadlock`](crate::ErrorKind::WouldDeadlock)."
    };
    (timeout) => {
        "Gives up waiting after `timeout` with \
         [`ErrorKind::Timeout`](crate::ErrorKind::Timeout), leaving nothing \
         held or queued (of several locks, those already taken are given \
         back; a candidacy is withdrawn). A `try_acquire` never waits for a \
         holder, and the timeout bounds the whole call there (a slow or \
         unreachable store). By default it waits as long as it takes."
    };
    (on_wait) => {
        "Calls `callback` once, when the acquire starts to wait because the \
         lock (or one of several) is busy; on a fair store, once its place in \
         the queue is fixed. It may run on a thread of the async runtime: \
         keep it short and do not block in it (sending on a channel is the \
         usual thing to do)."
    };
    (max_hold) => {
        "Stops renewing the lock `max_hold` after it was acquired, however \
         long the holder still wants it: a hung holder cannot keep it for \
         ever. Then the guard's [`lost`](crate::LockGuard::lost) signal fires \
         (`LockLost`, naming the max hold) and the holder must stop; its \
         lease still runs until it is released or runs out, so the next \
         holder gets the lock within one TTL. Of one owner's reentrant \
         acquisitions, the first one's bounds apply. A zero duration, or one \
         shorter than `min_hold`, is refused with \
         [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig) before \
         any I/O."
    };
    (min_hold) => {
        "Keeps the lock at least `min_hold` after it was acquired, even when \
         it is released sooner: the release (and a guard's drop) waits, \
         renewing, until then, so that a short job is not run again at once \
         by a machine whose clock or schedule is late (ShedLock's \
         `lockAtLeastFor`). If the process dies meanwhile, the lease frees \
         the lock within one TTL. Longer than `max_hold` is refused with \
         [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig)."
    };
    (options) => {
        "Applies every option set in `options` (an \
         [`AcquireOptions`](crate::AcquireOptions) built once, for any \
         request) over the ones set so far; a setter called afterwards \
         overrides it in turn. An option set there that this request does not \
         take (it has no setter of that name) makes the acquisition fail with \
         [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig), before \
         any I/O."
    };
}

/// Writes the option setters of a request builder, each with the one text
/// of [`option_doc!`] and an example: the methods listed first, from
/// `ttl`, `owner`, `reentrant`, `timeout`, `on_wait` and `options`. Invoked
/// inside the builder's `impl` block as
///
/// ```text
/// option_setters! {
///     ttl, timeout, on_wait, options;
///     options(field): "crate", "hidden setup line", "expression making a builder"
/// }
/// ```
///
/// where `options(field)` names the builder's [`AcquireOptions`] field (an
/// async builder), or `inner(field)` its async twin (a blocking builder,
/// which hands every option on); the three strings make the examples.
/// The first line lists exactly the methods written, so that a reader of
/// the source (`tests/blocking_parity.rs`) sees them.
#[doc(hidden)]
#[macro_export]
macro_rules! option_setters {
    (
        $($method:ident),+;
        $kind:ident($field:ident): $krate:literal, $setup:literal, $request:literal
    ) => {
        $crate::option_setters!(
            @each [$($method),+] [$($method),+] $kind $field $krate $setup $request
        );
    };
    (@each [$($all:ident),+] [] $($rest:tt)*) => {};
    (
        @each [$($all:ident),+] [$method:ident $(, $more:ident)*]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        $crate::option_setters!(
            @method $method [$($all),+] $kind $field $krate $setup $request
        );
        $crate::option_setters!(
            @each [$($all),+] [$($more),*] $kind $field $krate $setup $request
        );
    };
    (@method ttl $($rest:tt)+) => {
        $crate::option_setters!(@duration ttl 30 $($rest)+);
    };
    (@method timeout $($rest:tt)+) => {
        $crate::option_setters!(@duration timeout 5 $($rest)+);
    };
    (@method max_hold $($rest:tt)+) => {
        $crate::option_setters!(@duration max_hold 7200 $($rest)+);
    };
    (@method min_hold $($rest:tt)+) => {
        $crate::option_setters!(@duration min_hold 60 $($rest)+);
    };
    (
        @method owner [$($all:ident),+]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        $crate::option_setters!(@setter owner(owner: &$crate::Owner) $field $setup [
            concat!("let me = ", $krate, "::Owner::new(\"billing-worker-1\").unwrap();"),
            concat!("let request = ", $request, ".owner(&me);")
        ]);
    };
    (
        @method reentrant [$($all:ident),+]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        $crate::option_setters!(@setter reentrant(reentrant: bool) $field $setup [
            concat!("let request = ", $request, ".reentrant(false);")
        ]);
    };
    (
        @method on_wait [$($all:ident),+]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        $crate::option_setters!(
            @setter on_wait(callback: impl FnOnce() + Send + 'static) $field $setup [
                "let (tx, rx) = std::sync::mpsc::channel();",
                concat!(
                    "let request = ", $request,
                    ".on_wait(move || tx.send(\"waiting\").unwrap());"
                ),
                "# drop(rx);"
            ]
        );
    };
    (
        @method options [$($all:ident),+]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        #[doc = $crate::option_doc!(options)]
        ///
        /// ```
        #[doc = concat!("# ", $setup)]
        /// use std::time::Duration;
        #[doc = concat!(
            "let patient = ", $krate, "::AcquireOptions::new().timeout(Duration::from_secs(30));"
        )]
        #[doc = concat!("let request = ", $request, ".options(patient.clone());")]
        /// # drop(request);
        /// ```
        pub fn options(mut self, options: $crate::AcquireOptions) -> Self {
            self.$field = $crate::option_setters!(
                @apply $kind self.$field, options, [$($all),+]
            );
            self
        }
    };
    // `ttl`, `timeout`, `max_hold` and `min_hold`: a duration each.
    (
        @duration $name:ident $secs:literal [$($all:ident),+]
        $kind:ident $field:ident $krate:literal $setup:literal $request:literal
    ) => {
        $crate::option_setters!(@setter $name($name: ::std::time::Duration) $field $setup [
            "use std::time::Duration;",
            concat!(
                "let request = ", $request, ".", stringify!($name),
                "(Duration::from_secs(", $secs, "));"
            )
        ]);
    };
    // One setter: the option's text, an example (a hidden setup line, then
    // `line`s making `request`), and the call handed on to the field.
    (@setter $name:ident($arg:ident: $type:ty) $field:ident $setup:literal [$($line:expr),+]) => {
        #[doc = $crate::option_doc!($name)]
        ///
        /// ```
        #[doc = concat!("# ", $setup)]
        $(#[doc = $line])+
        /// # drop(request);
        /// ```
        pub fn $name(mut self, $arg: $type) -> Self {
            self.$field = self.$field.$name($arg);
            self
        }
    };
    // An async builder takes the options it has setters for.
    (@apply options $target:expr, $options:ident, [$($all:ident),+]) => {
        $target.taking($options, &[$(stringify!($all)),+])
    };
    // A blocking builder hands them on to its async twin.
    (@apply inner $target:expr, $options:ident, [$($all:ident),+]) => {
        $target.options($options)
    };
}

/// The options of an acquisition, built once and applied to any request
/// with its `options` method ([`LockRequest::options`](crate::LockRequest::options),
/// [`MultiLockRequest::options`](crate::MultiLockRequest::options),
/// [`Candidate::options`](crate::Candidate::options), and their blocking
/// twins). Every request has a setter of the same name for each option it
/// takes; an option left unset keeps the request's default.
///
/// A clone shares the [`on_wait`](Self::on_wait) callback: it runs once,
/// for whichever request waits first.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> omnilock_core::Result<()> {
/// use std::time::Duration;
/// use omnilock_core::{AcquireOptions, Locks, MemStore};
/// let locks = Locks::new(MemStore::new());
/// let batch = AcquireOptions::new()
///     .ttl(Duration::from_secs(60))
///     .timeout(Duration::from_secs(5));
/// let one = locks.lock("reports/daily").options(batch.clone()).acquire().await?;
/// let both = locks.lock_all(&["in/a", "in/b"]).options(batch).acquire().await?;
/// assert_eq!(one.ttl(), Duration::from_secs(60));
/// # drop((one, both));
/// # Ok(()) }
/// ```
#[derive(Clone, Debug, Default)]
pub struct AcquireOptions {
    pub(crate) ttl: Option<Duration>,
    pub(crate) owner: Option<Owner>,
    pub(crate) reentrant: Option<bool>,
    pub(crate) timeout: Option<Duration>,
    pub(crate) waiting: Option<WaitNotice>,
    pub(crate) max_hold: Option<Duration>,
    pub(crate) min_hold: Option<Duration>,
    /// The first option given to a request (through `options`) that it
    /// does not take.
    refused: Option<&'static str>,
}

impl AcquireOptions {
    /// No option set: every request keeps its defaults.
    ///
    /// ```
    /// let options = omnilock_core::AcquireOptions::new();
    /// assert!(options.check().is_ok());
    /// ```
    pub fn new() -> Self {
        AcquireOptions::default()
    }

    #[doc = crate::option_doc!(ttl)]
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = omnilock_core::AcquireOptions::new().ttl(Duration::from_secs(30));
    /// assert!(options.check().is_ok());
    /// ```
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.ttl = Some(ttl);
        self
    }

    #[doc = crate::option_doc!(owner)]
    ///
    /// ```
    /// use omnilock_core::{AcquireOptions, Owner};
    /// let me = Owner::new("billing-worker-1")?;
    /// let options = AcquireOptions::new().owner(&me);
    /// # drop(options);
    /// # Ok::<(), omnilock_core::Error>(())
    /// ```
    pub fn owner(mut self, owner: &Owner) -> Self {
        self.owner = Some(owner.clone());
        self
    }

    #[doc = crate::option_doc!(reentrant)]
    ///
    /// ```
    /// let options = omnilock_core::AcquireOptions::new().reentrant(false);
    /// # drop(options);
    /// ```
    pub fn reentrant(mut self, reentrant: bool) -> Self {
        self.reentrant = Some(reentrant);
        self
    }

    #[doc = crate::option_doc!(timeout)]
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = omnilock_core::AcquireOptions::new().timeout(Duration::from_secs(5));
    /// # drop(options);
    /// ```
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = Some(timeout);
        self
    }

    #[doc = crate::option_doc!(on_wait)]
    ///
    /// ```
    /// let (tx, rx) = std::sync::mpsc::channel();
    /// let options = omnilock_core::AcquireOptions::new().on_wait(move || tx.send(()).unwrap());
    /// # drop((options, rx));
    /// ```
    pub fn on_wait(mut self, callback: impl FnOnce() + Send + 'static) -> Self {
        self.waiting = Some(WaitNotice::new(callback));
        self
    }

    #[doc = crate::option_doc!(max_hold)]
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = omnilock_core::AcquireOptions::new().max_hold(Duration::from_secs(7200));
    /// assert!(options.check().is_ok());
    /// ```
    pub fn max_hold(mut self, max_hold: Duration) -> Self {
        self.max_hold = Some(max_hold);
        self
    }

    #[doc = crate::option_doc!(min_hold)]
    ///
    /// ```
    /// use std::time::Duration;
    /// let options = omnilock_core::AcquireOptions::new().min_hold(Duration::from_secs(60));
    /// assert!(options.check().is_ok());
    /// ```
    pub fn min_hold(mut self, min_hold: Duration) -> Self {
        self.min_hold = Some(min_hold);
        self
    }

    /// These options with every option set in `options` taking over, as a
    /// request's own `options` method applies them: to build a set from a
    /// shared base.
    ///
    /// ```
    /// use std::time::Duration;
    /// use omnilock_core::AcquireOptions;
    /// let base = AcquireOptions::new().ttl(Duration::from_secs(60));
    /// let patient = base.clone().options(AcquireOptions::new().timeout(Duration::from_secs(30)));
    /// # drop(patient);
    /// ```
    pub fn options(self, options: AcquireOptions) -> Self {
        self.taking(
            options,
            &[
                "ttl",
                "owner",
                "reentrant",
                "timeout",
                "on_wait",
                "max_hold",
                "min_hold",
            ],
        )
    }

    /// Checks the options before any I/O, as every acquisition does: a TTL
    /// in range ([`check_ttl`]) and no option given to a request that does
    /// not take it. An [`ErrorKind::InvalidConfig`](crate::ErrorKind::InvalidConfig)
    /// error otherwise.
    ///
    /// ```
    /// use std::time::Duration;
    /// use omnilock_core::{AcquireOptions, ErrorKind};
    /// let err = AcquireOptions::new().ttl(Duration::from_millis(1)).check().unwrap_err();
    /// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
    /// ```
    pub fn check(&self) -> Result<()> {
        if let Some(option) = self.refused {
            return Err(Error::config(format!(
                "the option `{option}` does not apply to this request (it has no `{option}` \
                 setter); leave it out of the options given to it"
            )));
        }
        if let Some(ttl) = self.ttl {
            check_ttl(ttl)?;
        }
        check_hold_bounds(self.min_hold, self.max_hold)
    }

    /// Applies the options set in `options` that a request with the setters
    /// `takes` takes; the first one it does not take is remembered, for
    /// [`check`](Self::check) to refuse.
    pub(crate) fn taking(mut self, options: AcquireOptions, takes: &[&str]) -> Self {
        let mut refuse = |option: &'static str| {
            let taken = takes.contains(&option);
            if !taken && self.refused.is_none() {
                self.refused = Some(option);
            }
            taken
        };
        let ttl = options.ttl.filter(|_| refuse("ttl"));
        let owner = options.owner.filter(|_| refuse("owner"));
        let reentrant = options.reentrant.filter(|_| refuse("reentrant"));
        let timeout = options.timeout.filter(|_| refuse("timeout"));
        let waiting = options.waiting.filter(|_| refuse("on_wait"));
        let max_hold = options.max_hold.filter(|_| refuse("max_hold"));
        let min_hold = options.min_hold.filter(|_| refuse("min_hold"));
        AcquireOptions {
            max_hold: max_hold.or(self.max_hold),
            min_hold: min_hold.or(self.min_hold),
            ttl: ttl.or(self.ttl),
            owner: owner.or(self.owner),
            reentrant: reentrant.or(self.reentrant),
            timeout: timeout.or(self.timeout),
            waiting: waiting.or(self.waiting),
            refused: self.refused.or(options.refused),
        }
    }

    /// The "now waiting" notice, or one nobody listens to.
    pub(crate) fn waiting(&self) -> WaitNotice {
        self.waiting.clone().unwrap_or_default()
    }
}

/// `min_hold` and `max_hold` as [`AcquireOptions::check`] accepts them:
/// a `max_hold` above zero, a `min_hold` no longer than it.
///
/// ```
/// use std::time::Duration;
/// use omnilock_core::{ErrorKind, check_hold_bounds};
/// let (min, max) = (Duration::from_secs(60), Duration::from_secs(30));
/// let err = check_hold_bounds(Some(min), Some(max)).unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::InvalidConfig);
/// assert!(check_hold_bounds(Some(max), Some(min)).is_ok());
/// ```
pub fn check_hold_bounds(min_hold: Option<Duration>, max_hold: Option<Duration>) -> Result<()> {
    // Far beyond any job; what a typo of units gives is refused, not
    // overflowed.
    const LONGEST: Duration = Duration::from_secs(400 * 24 * 3600);
    for (name, bound) in [("min_hold", min_hold), ("max_hold", max_hold)] {
        if bound.is_some_and(|bound| bound > LONGEST) {
            return Err(Error::config(format!("{name} is at most 400 days")));
        }
    }
    if max_hold.is_some_and(|max| max.is_zero()) {
        return Err(Error::config(
            "max_hold must be above zero (leave it out to renew for as long as the lock is held)",
        ));
    }
    if let (Some(min), Some(max)) = (min_hold, max_hold)
        && min > max
    {
        return Err(Error::config(format!(
            "min_hold ({min:?}) is longer than max_hold ({max:?}): the lock cannot be kept \
             at least the one and at most the other"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ErrorKind, Locks, MemStore};

    /// Options a request takes apply over the ones set before; one it does
    /// not take is refused by `check`, and the rest still apply.
    #[test]
    fn taking_applies_and_refuses() {
        let owner = Owner::random();
        let given = AcquireOptions::new()
            .ttl(Duration::from_secs(30))
            .owner(&owner);
        let taken = AcquireOptions::new()
            .timeout(Duration::from_secs(1))
            .taking(given.clone(), &["ttl", "owner", "timeout"]);
        assert_eq!(taken.ttl, Some(Duration::from_secs(30)));
        assert_eq!(taken.owner.as_ref(), Some(&owner));
        assert_eq!(taken.timeout, Some(Duration::from_secs(1)));
        assert!(taken.check().is_ok());

        let refused = AcquireOptions::new().taking(given, &["ttl", "timeout"]);
        assert_eq!(refused.ttl, Some(Duration::from_secs(30)));
        assert_eq!(refused.owner, None);
        let err = refused.check().unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig);
        assert!(err.to_string().contains("`owner`"), "{err}");
    }

    /// One option set applies to a lock, a set of locks and a candidate
    /// alike; an option a request has no setter for is refused before any
    /// I/O, naming the option.
    #[tokio::test]
    async fn one_option_set_for_every_request() {
        let locks = Locks::new(MemStore::new());
        let long = AcquireOptions::new().ttl(Duration::from_secs(40));
        let one = locks
            .lock("a")
            .options(long.clone())
            .acquire()
            .await
            .unwrap();
        assert_eq!(one.ttl(), Duration::from_secs(40));
        let all = locks.lock_all(&["b", "c"]).options(long.clone());
        let all = all.acquire().await.unwrap();
        assert!(
            all.guards()
                .iter()
                .all(|part| part.ttl() == Duration::from_secs(40))
        );
        let leader = locks.election("e");
        let leader = leader
            .candidate("me")
            .options(long)
            .campaign()
            .await
            .unwrap();
        drop((one, all, leader));

        let strict = AcquireOptions::new().reentrant(false);
        let err = locks.lock_all(&["d"]).options(strict).try_acquire().await;
        let err = err.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::InvalidConfig, "{err}");
        assert!(err.to_string().contains("`reentrant`"), "{err}");
        let mine = AcquireOptions::new().owner(&Owner::random());
        let election = locks.election("f");
        let err = election.candidate("me").options(mine).campaign().await;
        assert_eq!(err.unwrap_err().kind(), ErrorKind::InvalidConfig);
    }
}
