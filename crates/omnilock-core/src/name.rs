//! Lock names and owners: validated once, before any I/O.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, ErrorKind, Result};

/// The longest lock name or owner, in bytes.
pub const MAX_NAME_BYTES: usize = 256;

/// A validated lock name: UTF-8, 1 to 256 bytes, no control characters.
///
/// Any such string is a valid name, `/`, `..`, `*`, quotes and spaces included:
/// backends map names to keys, paths and rows in ways that cannot escape their
/// prefix (encoding path separators, binding SQL parameters), so users never
/// need to escape anything themselves.
///
/// ```
/// use omnilock_core::{ErrorKind, LockName};
/// assert_eq!(LockName::new("jobs/nightly report").unwrap().as_str(), "jobs/nightly report");
/// assert_eq!(LockName::new("").unwrap_err().kind(), ErrorKind::InvalidName);
/// assert_eq!(LockName::new("a\nb").unwrap_err().kind(), ErrorKind::InvalidName);
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct LockName(Arc<str>);

impl LockName {
    /// Validates `name`.
    pub fn new(name: &str) -> Result<Self> {
        check(name, "lock name", ErrorKind::InvalidName)?;
        Ok(LockName(name.into()))
    }

    /// The name as given.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for LockName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl AsRef<str> for LockName {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Who holds a lock.
///
/// Two acquisitions by different owners exclude each other, even in one
/// process through one client. An owner that already holds a lock acquires it
/// again at once (reentrancy) unless the acquisition is non-reentrant.
///
/// By default every acquisition gets a random owner of its own, so nothing
/// is reentrant by accident (on etcd, a handle lends such an owner again,
/// but only after its hold was released). Pass an owner explicitly to nest acquisitions, or use
/// a stable name so that several processes act as one owner (on backends whose
/// [`crate::Capabilities::cross_process_reentrancy`] is true).
///
/// ```
/// use omnilock_core::Owner;
/// let a = Owner::random();
/// let b = Owner::random();
/// assert_ne!(a, b);
/// assert_eq!(Owner::new("billing-worker-1").unwrap().as_str(), "billing-worker-1");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner(Arc<str>);

impl Owner {
    /// A stable owner name, validated like a lock name.
    pub fn new(owner: &str) -> Result<Self> {
        check(owner, "owner", ErrorKind::InvalidConfig)?;
        Ok(Owner(owner.into()))
    }

    /// A fresh owner that an operator can read: `host:pid:random`, the
    /// machine's host name (letters, digits, `.`, `-` and `_` kept, anything
    /// else `_`, at most 63 bytes; `host` when it cannot be read), the
    /// process id and 128 random bits, so it is unique across processes and
    /// machines and says where the holder runs.
    ///
    /// ```
    /// let owner = omnilock_core::Owner::random();
    /// let parts: Vec<&str> = owner.as_str().split(':').collect();
    /// assert_eq!(parts.len(), 3);
    /// assert_eq!(parts[1], std::process::id().to_string());
    /// assert_eq!(parts[2].len(), 32);
    /// ```
    pub fn random() -> Self {
        use std::fmt::Write;
        // `process::id()` is a system call each time, and the host name more
        // than one; every lock request without a named owner draws an owner
        // here.
        static PROCESS: std::sync::OnceLock<String> = std::sync::OnceLock::new();
        let process = PROCESS.get_or_init(|| format!("{}:{}:", host_label(), std::process::id()));
        let bits: u128 = rand::random();
        let mut owner = String::with_capacity(process.len() + 32);
        owner.push_str(process);
        let _ = write!(owner, "{bits:032x}");
        Owner(owner.into())
    }

    /// The owner as a string, as stored in the backend.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Debug for Owner {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

/// This machine's host name as an owner's first part (see
/// [`Owner::random`]).
fn host_label() -> String {
    let name = whoami::hostname().unwrap_or_default();
    let mut label: String = name
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_') {
                c
            } else {
                '_'
            }
        })
        .take(63)
        .collect();
    if label.is_empty() {
        label.push_str("host");
    }
    label
}

fn check(value: &str, what: &str, kind: ErrorKind) -> Result<()> {
    if value.is_empty() {
        return Err(Error::new(kind, format!("{what} is empty")));
    }
    if value.len() > MAX_NAME_BYTES {
        return Err(Error::new(
            kind,
            format!(
                "{what} is {} bytes long; at most {MAX_NAME_BYTES} are allowed",
                value.len()
            ),
        ));
    }
    if let Some(c) = value.chars().find(|c| c.is_control()) {
        return Err(Error::new(
            kind,
            format!("{what} contains the control character {c:?}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn limits() {
        assert!(LockName::new(&"x".repeat(256)).is_ok());
        assert!(LockName::new(&"x".repeat(257)).is_err());
        // 128 two-byte characters are 256 bytes.
        assert!(LockName::new(&"é".repeat(128)).is_ok());
        assert!(LockName::new(&"é".repeat(129)).is_err());
        for bad in ["\0", "a\tb", "\u{7f}", "\u{85}"] {
            assert_eq!(
                LockName::new(bad).unwrap_err().kind(),
                ErrorKind::InvalidName
            );
        }
        for fine in [
            "/",
            "../../etc/passwd",
            "a b",
            "'; DROP TABLE x; --",
            "{tag}",
            "*",
        ] {
            assert!(LockName::new(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn owners() {
        assert_eq!(Owner::new("").unwrap_err().kind(), ErrorKind::InvalidConfig);
        // host:pid:random, the host reduced to characters every store keeps.
        let owner = Owner::random();
        let parts: Vec<&str> = owner.as_str().split(':').collect();
        assert_eq!(parts.len(), 3, "{owner}");
        assert!(
            parts[0]
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_')),
            "{owner}"
        );
        assert_eq!(parts[1], std::process::id().to_string());
        assert_ne!(Owner::random(), owner);
    }
}
