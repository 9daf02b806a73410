//! Exit statuses, as the `omnilock` command uses them (sysexits-style).

use omnilock::raw::StoreUrl;
use omnilock::{Error, ErrorKind};

/// Bad arguments or store URL (EX_USAGE).
pub(crate) const USAGE: u8 = 64;
/// The store is unreachable or failed (EX_UNAVAILABLE).
pub(crate) const UNAVAILABLE: u8 = 69;
/// Anything else (EX_SOFTWARE).
pub(crate) const SOFTWARE: u8 = 70;

/// The exit status for an error.
pub(crate) fn code_for(err: &Error) -> u8 {
    match err.kind() {
        ErrorKind::InvalidName | ErrorKind::InvalidConfig | ErrorKind::Unsupported => USAGE,
        ErrorKind::Unavailable | ErrorKind::Backend => UNAVAILABLE,
        _ => SOFTWARE,
    }
}

/// Prints one line for `err` and returns its exit status.
pub(crate) fn fail(err: &Error) -> u8 {
    eprintln!("omnilock-bench: {err}");
    code_for(err)
}

/// The store URL for messages: credentials redacted, or a placeholder when
/// it does not even parse (the parse error says why).
pub(crate) fn shown(store: &str) -> String {
    StoreUrl::parse(store)
        .map(|url| url.to_string())
        .unwrap_or_else(|_| "(invalid store URL)".to_string())
}
