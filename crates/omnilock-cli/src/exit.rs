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
/// The request contradicts the lock's other users: a semaphore asked for
/// with another number of permits (EX_DATAERR).
pub(crate) const DATAERR: u8 = 65;
/// A fenced write was refused: a later holder has written since
/// (EX_CANTCREAT: the output cannot be created).
pub(crate) const CANTCREAT: u8 = 73;
/// Reading the input or writing the output failed (EX_IOERR).
pub(crate) const IOERR: u8 = 74;
/// The store refused the credentials or denied access (EX_NOPERM).
pub(crate) const NOPERM: u8 = 77;
/// TLS failed for good: a certificate that does not verify (EX_CONFIG).
pub(crate) const CONFIG: u8 = 78;
/// The store is unreachable or failed (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (EX_SOFTWARE).
pub(crate) const SOFTWARE: u8 = 70;
/// The lock was not acquired in time (EX_TEMPFAIL).
pub(crate) const TEMPFAIL: u8 = 75;
/// `run --once-per`: the command already ran within the period, so it did
/// not run now (outside sysexits' range, so no failure reads as it).
pub(crate) const DONE: u8 = 79;

/// The exit status for an error.
pub(crate) fn code_for(err: &Error) -> u8 {
    match err.kind() {
        ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => USAGE,
        ErrorKind::Conflict => DATAERR,
        ErrorKind::StaleToken => CANTCREAT,
        ErrorKind::Auth => NOPERM,
        ErrorKind::Tls => CONFIG,
        ErrorKind::Timeout => TEMPFAIL,
        ErrorKind::Unavailable | ErrorKind::Backend => UNAVAILABLE,
        _ => SOFTWARE,
    }
}

/// Prints one line for `err` and returns its exit status. A classified
/// error's message says what happened in the operator's words; an error
/// the store answered that omnilock does not classify (`Backend`) shows its
/// causes too, since the store's own words are all there is.
pub(crate) fn fail(err: &Error) -> u8 {
    if err.kind() == ErrorKind::Backend {
        eprintln!("omnilock: {err:#}");
    } else {
        eprintln!("omnilock: {err}");
    }
    code_for(err)
}

/// The store URL for messages: credentials redacted, or a placeholder when
/// it does not even parse (the parse error says why).
pub(crate) fn shown(store: &str) -> String {
    StoreUrl::parse(store)
        .map(|url| url.to_string())
        .unwrap_or_else(|_| "(invalid store URL)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// docs/semantics.md §9 says which status each kind exits with; the
    /// table and [`code_for`] agree, for every kind.
    #[test]
    fn the_documented_exit_statuses_are_the_ones_used() {
        let page = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../docs/semantics.md");
        let text = std::fs::read_to_string(&page).expect("docs/semantics.md");
        let kinds = [
            ErrorKind::InvalidName,
            ErrorKind::InvalidConfig,
            ErrorKind::Auth,
            ErrorKind::Tls,
            ErrorKind::Conflict,
            ErrorKind::StaleToken,
            ErrorKind::Timeout,
            ErrorKind::Unavailable,
            ErrorKind::NotOwner,
            ErrorKind::LockLost,
            ErrorKind::WouldDeadlock,
            ErrorKind::Unsupported,
            ErrorKind::Backend,
        ];
        let rows: Vec<Vec<&str>> = text
            .lines()
            .skip_while(|line| !line.starts_with("| kind | means |"))
            .skip(2)
            .take_while(|line| line.starts_with('|'))
            .map(|line| line.trim_matches('|').split('|').map(str::trim).collect())
            .collect();
        assert_eq!(rows.len(), kinds.len(), "one row per kind");
        for kind in kinds {
            let name = format!("`{kind:?}`");
            let row = rows
                .iter()
                .find(|row| row[0] == name)
                .unwrap_or_else(|| panic!("no row for {name}"));
            let documented: u8 = row[3].parse().expect("an exit status");
            let err = Error::new(kind, "x");
            assert_eq!(code_for(&err), documented, "{name}");
        }
    }
}
