//! Records: short notes a store keeps for a while, apart from its locks.
//! A job that must run at most once per period writes one when it has
//! succeeded ("done, started at ..."), and every later start reads it
//! under the job's lock (`omnilock run --once-per`). The store, not the
//! writer, times the record out, so a machine whose clock is late cannot
//! misjudge the period.

use std::time::Duration;

/// The longest a record may be kept: a little over a year.
pub const MAX_RECORD_KEEP: Duration = Duration::from_secs(400 * 24 * 3600);

/// The longest record value, in bytes.
pub const MAX_RECORD_BYTES: usize = 1024;

/// A record read back from the store ([`crate::Locks::read_record`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Record {
    /// What the writer stored.
    pub value: String,
    /// How long the store keeps it yet, where the store can say.
    pub left: Option<Duration>,
}

impl Record {
    /// A record holding `value`, kept `left` longer.
    pub fn new(value: impl Into<String>, left: Option<Duration>) -> Self {
        Record {
            value: value.into(),
            left,
        }
    }
}

/// Checks a record's value and keep before any I/O: at most
/// [`MAX_RECORD_BYTES`] bytes without control characters, kept from 1 ms
/// to [`MAX_RECORD_KEEP`].
pub(crate) fn check(value: &str, keep: Duration) -> crate::Result<()> {
    if value.len() > MAX_RECORD_BYTES || value.chars().any(char::is_control) {
        return Err(crate::Error::config(format!(
            "a record's value is at most {MAX_RECORD_BYTES} bytes with no control characters"
        )));
    }
    if keep < Duration::from_millis(1) || keep > MAX_RECORD_KEEP {
        return Err(crate::Error::config(format!(
            "a record is kept from 1ms to {} days, not {keep:?}",
            MAX_RECORD_KEEP.as_secs() / 86_400
        )));
    }
    Ok(())
}
