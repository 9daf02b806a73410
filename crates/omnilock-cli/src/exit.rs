//! Exit statuses and how errors map to them.

use omnilock::{Error, ErrorKind, StoreUrl};

/// Bad arguments, lock name or store URL (EX_USAGE).
pub const USAGE: u8 = 64;
/// The store is unreachable or failed (EX_UNAVAILABLE).
pub const UNAVAILABLE: u8 = 69;
/// The lock was lost while the command ran (EX_SOFTWARE).
pub const SOFTWARE: u8 = 70;
/// The lock was not acquired in time (EX_TEMPFAIL).
pub const TEMPFAIL: u8 = 75;

/// The exit status for an error.
pub fn code_for(err: &Error) -> u8 {
    match err.kind() {
        ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => USAGE,
        ErrorKind::Timeout => TEMPFAIL,
        ErrorKind::Unavailable | ErrorKind::Backend => UNAVAILABLE,
        _ => SOFTWARE,
    }
}

/// Prints one line for `err` and returns its exit status.
pub fn fail(err: &Error) -> u8 {
    eprintln!("omnilock: {err}");
    code_for(err)
}

/// The store URL for messages: credentials redacted, or a placeholder when
/// it does not even parse (the parse error says why).
pub fn shown(store: &str) -> String {
    StoreUrl::parse(store)
        .map(|url| url.to_string())
        .unwrap_or_else(|_| "(invalid store URL)".to_string())
}
