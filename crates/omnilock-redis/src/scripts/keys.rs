//! The keys of one lock, one semaphore or read-write lock, and one
//! Redlock line, all in the hash slot of `{prefix:name}`.

use omnilock_core::LockName;
use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};

/// Braces would change the hash tag and `%` is the escape itself; everything
/// else in a lock name is kept as is.
const KEY: &AsciiSet = &CONTROLS.add(b'{').add(b'}').add(b'%');

/// The prefix is written with `:` (which ends it in a key) and `%` escaped,
/// so that `(prefix, name)` maps one-to-one to keys: prefix `app` with name
/// `x:y` and prefix `app:x` with name `y` are different locks.
const PREFIX: &AsciiSet = &KEY.add(b':');

/// The keys of one lock, all in the hash slot of `{prefix:name}`.
pub(crate) struct Keys {
    pub lock: String,
    pub fence: String,
    pub queue: String,
    pub timeouts: String,
}

impl Keys {
    pub(crate) fn new(prefix: &str, name: &str) -> Self {
        // Built by appending, not `format!`: this runs twice per lock and
        // release, on the path every uncontended acquire takes.
        let mut lock = String::with_capacity(prefix.len() + name.len() + 3);
        lock.push('{');
        lock.extend(utf8_percent_encode(prefix, PREFIX));
        lock.push(':');
        lock.extend(utf8_percent_encode(name, KEY));
        lock.push('}');
        let with = |suffix: &str| {
            let mut key = String::with_capacity(lock.len() + suffix.len());
            key.push_str(&lock);
            key.push_str(suffix);
            key
        };
        Keys {
            fence: with(":fence"),
            queue: with(":queue"),
            timeouts: with(":timeouts"),
            lock,
        }
    }
}

/// The keys of one semaphore or read-write lock (see `scripts/counted.rs`), in the
/// slot of the mutex of the same name, apart from its keys: `family` is
/// `sem` or `rw`. The fencing counter is the mutex's (tokens rise across
/// all three).
pub(crate) struct CountedKeys {
    /// The mutex's key: what routes a command and names the wake-up channel.
    pub lock: String,
    pub order: String,
    pub entries: String,
    pub expiry: String,
    pub fence: String,
}

impl CountedKeys {
    pub(crate) fn new(prefix: &str, name: &str, family: &str) -> Self {
        let keys = Keys::new(prefix, name);
        CountedKeys {
            order: format!("{}:{family}:order", keys.lock),
            entries: format!("{}:{family}:entries", keys.lock),
            expiry: format!("{}:{family}:expiry", keys.lock),
            fence: keys.fence,
            lock: keys.lock,
        }
    }
}

/// The keys of one lock on each node.
pub(crate) struct LineKeys {
    pub lock: String,
    pub line: String,
    pub places: String,
}

impl LineKeys {
    pub(crate) fn new(prefix: &str, name: &LockName) -> Self {
        let keys = Keys::new(prefix, name.as_str());
        LineKeys {
            line: format!("{}:line", keys.lock),
            places: format!("{}:places", keys.lock),
            lock: keys.lock,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn names_cannot_leave_their_hash_tag() {
        let keys = Keys::new("omnilock", "a}b{c%d");
        assert_eq!(keys.lock, "{omnilock:a%7Db%7Bc%25d}");
        assert_eq!(keys.queue, "{omnilock:a%7Db%7Bc%25d}:queue");
        // Distinct names stay distinct keys.
        assert_ne!(Keys::new("p", "a%7D").lock, Keys::new("p", "a}").lock);
    }

    #[test]
    fn abutting_prefixes_and_names_do_not_meet() {
        assert_ne!(Keys::new("app", "x:y").lock, Keys::new("app:x", "y").lock);
        assert_ne!(Keys::new("a%3Ab", "c").lock, Keys::new("a:b", "c").lock);
        assert_eq!(Keys::new("omnilock", "job").lock, "{omnilock:job}");
    }

    proptest! {
        /// Distinct (prefix, name) pairs never share a key.
        #[test]
        fn keys_are_one_to_one(
            a in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
            b in ("[a-z:%{}]{1,6}", "[a-z:%{}/]{1,6}"),
        ) {
            let (ka, kb) = (Keys::new(&a.0, &a.1), Keys::new(&b.0, &b.1));
            prop_assert_eq!(a == b, ka.lock == kb.lock);
            for key in [&ka.lock, &ka.fence, &ka.queue, &ka.timeouts] {
                for other in [&kb.lock, &kb.fence, &kb.queue, &kb.timeouts] {
                    if a != b {
                        prop_assert_ne!(key, other);
                    }
                }
            }
        }
    }
}
