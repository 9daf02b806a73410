//! Exit statuses and how errors map to them.

use std::sync::atomic::{AtomicI32, Ordering};

use omnilock::raw::StoreUrl;
use omnilock::{Error, ErrorKind};

/// A signal `omnilock` should die of once it has cleaned up (0: none).
static DIE_OF: AtomicI32 = AtomicI32::new(0);

/// Asks for `omnilock` to end by `signal` once everything is released (see
/// [`raise_if_asked`]) and returns the status a shell would report, 128 + N.
pub(crate) fn die_of(signal: i32) -> u8 {
    DIE_OF.store(signal, Ordering::SeqCst);
    128u8.saturating_add(signal as u8)
}

/// Dies of the signal [`die_of`] asked for, if any: a shell tells "killed by
/// SIGINT" from "exited 130" and only stops a loop or script for the former.
pub(crate) fn raise_if_asked() {
    let signal = DIE_OF.load(Ordering::SeqCst);
    if signal != 0 {
        // SAFETY: restoring the default action and raising it ends the
        // process the way the signal itself would have.
        unsafe {
            libc::signal(signal, libc::SIG_DFL);
            libc::raise(signal);
        }
    }
}

/// Bad arguments, lock name or store URL (EX_USAGE).
pub(crate) const USAGE: u8 = 64;
/// The store is unreachable or failed (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (EX_SOFTWARE).
pub(crate) const SOFTWARE: u8 = 70;
/// The lock was not acquired in time (EX_TEMPFAIL).
pub(crate) const TEMPFAIL: u8 = 75;

/// The exit status for an error.
pub(crate) fn code_for(err: &Error) -> u8 {
    match err.kind() {
        ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => USAGE,
        ErrorKind::Timeout => TEMPFAIL,
        ErrorKind::Unavailable | ErrorKind::Backend => UNAVAILABLE,
        _ => SOFTWARE,
    }
}

/// Prints one line for `err` and returns its exit status.
pub(crate) fn fail(err: &Error) -> u8 {
    eprintln!("omnilock: {err}");
    code_for(err)
}

/// The store URL for messages: credentials redacted, or a placeholder when
/// it does not even parse (the parse error says why).
pub(crate) fn shown(store: &str) -> String {
    StoreUrl::parse(store)
        .map(|url| url.to_string())
        .unwrap_or_else(|_| "(invalid store URL)".to_string())
}
