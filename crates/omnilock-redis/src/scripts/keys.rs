//! The keys of one lock, one semaphore or read-write lock, and one
//! Redlock line, all in the hash slot of `{prefix:name}`.

use omnilock_core::{LockKind, LockName, Primitive};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};

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

/// The key of the record `name` (see `scripts/records.rs`):
/// `{prefix:name}:record`. It shares the hash slot of the lock of the same
/// name (on a cluster, the same master) but is none of the lock's keys: no
/// lock script touches it, and a listing does not read it as a lock.
pub(crate) fn record_key(prefix: &str, name: &str) -> String {
    let mut key = Keys::new(prefix, name).lock;
    key.push_str(":record");
    key
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

/// The key family (`sem`, `rw`) of a semaphore's or read-write lock's
/// entries, as core's [`Primitive::share`] names it; `None` for the mutex.
pub(crate) fn family(kind: LockKind) -> Option<&'static str> {
    let primitive = match kind {
        LockKind::Semaphore => Primitive::Semaphore { permits: 1 },
        LockKind::RwLock => Primitive::Read,
        _ => return None,
    };
    primitive.share().map(|share| share.family)
}

/// The `SCAN MATCH` pattern of the keys of every lock whose name starts
/// with `name_prefix`: the literal start of their keys, glob characters
/// escaped, then `*`. Encoding maps each character on its own, so a name
/// starts with `name_prefix` exactly when its encoding starts with the
/// prefix's.
pub(crate) fn scan_pattern(prefix: &str, name_prefix: &str) -> String {
    let mut literal = String::from("{");
    literal.extend(utf8_percent_encode(prefix, PREFIX));
    literal.push(':');
    literal.extend(utf8_percent_encode(name_prefix, KEY));
    let mut pattern = String::with_capacity(literal.len() + 8);
    for c in literal.chars() {
        if matches!(c, '*' | '?' | '[' | ']' | '\\') {
            pattern.push('\\');
        }
        pattern.push(c);
    }
    pattern.push('*');
    pattern
}

/// The lock that `key` (found by [`scan_pattern`]) is the key of: its name
/// and kind, for a lock key `{prefix:name}` (a mutex, or Redlock's lock)
/// and the entries of a semaphore or read-write lock
/// (`{prefix:name}:sem:entries`, `...:rw:entries`); `None` for every other
/// key (queues, fences, an application's keys in the lock's slot).
pub(crate) fn lock_of_key(prefix: &str, key: &[u8]) -> Option<(LockName, LockKind)> {
    let key = std::str::from_utf8(key).ok()?;
    let mut start = String::from("{");
    start.extend(utf8_percent_encode(prefix, PREFIX));
    start.push(':');
    let rest = key.strip_prefix(start.as_str())?;
    // Braces in a name are escaped: the first one closes the hash tag.
    let (encoded, suffix) = rest.split_once('}')?;
    let kind = match suffix {
        "" => LockKind::Mutex,
        _ => [LockKind::Semaphore, LockKind::RwLock]
            .into_iter()
            .find(|kind| family(*kind).is_some_and(|f| suffix == format!(":{f}:entries")))?,
    };
    let name = percent_decode_str(encoded).decode_utf8().ok()?;
    // Only what `Keys::new` writes: a key spelled otherwise is no lock's.
    if Keys::new(prefix, &name).lock[start.len()..].strip_suffix('}') != Some(encoded) {
        return None;
    }
    Some((LockName::new(&name).ok()?, kind))
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
        assert_eq!(
            record_key("omnilock", "a}b{c%d"),
            "{omnilock:a%7Db%7Bc%25d}:record"
        );
        // Distinct names stay distinct keys.
        assert_ne!(Keys::new("p", "a%7D").lock, Keys::new("p", "a}").lock);
    }

    #[test]
    fn abutting_prefixes_and_names_do_not_meet() {
        assert_ne!(Keys::new("app", "x:y").lock, Keys::new("app:x", "y").lock);
        assert_ne!(Keys::new("a%3Ab", "c").lock, Keys::new("a:b", "c").lock);
        assert_eq!(Keys::new("omnilock", "job").lock, "{omnilock:job}");
    }

    #[test]
    fn scan_patterns_escape_glob_characters() {
        assert_eq!(scan_pattern("omnilock", "jobs/"), "{omnilock:jobs/*");
        assert_eq!(
            scan_pattern("app*", "a*b?c[d]e\\f%"),
            "{app\\*:a\\*b\\?c\\[d\\]e\\\\f%25*"
        );
        assert_eq!(scan_pattern("omnilock", ""), "{omnilock:*");
    }

    #[test]
    fn keys_read_back_as_their_locks() {
        let name = "jobs/ünï cödé 'q' %_*?[x]{y}";
        let keys = Keys::new("omnilock", name);
        let lock = |key: &str| lock_of_key("omnilock", key.as_bytes());
        let named = |kind| Some((LockName::new(name).unwrap(), kind));
        assert_eq!(lock(&keys.lock), named(LockKind::Mutex));
        for kind in [LockKind::Semaphore, LockKind::RwLock] {
            let counted = CountedKeys::new("omnilock", name, family(kind).unwrap());
            assert_eq!(lock(&counted.entries), named(kind));
            assert_eq!(lock(&counted.order), None);
        }
        let record = record_key("omnilock", name);
        for other in [&keys.queue, &keys.fence, &keys.timeouts, &record] {
            assert_eq!(lock(other), None);
        }
        assert_eq!(lock(&format!("{}:queue:abc:1", keys.lock)), None);
        assert_eq!(lock("{other:jobs}"), None);
        // Not how omnilock spells the name: no lock's key.
        assert_eq!(lock("{omnilock:%6Aobs}"), None);
    }

    proptest! {
        /// Every lock key reads back as its name, and the scan pattern of
        /// any prefix of the name matches it.
        #[test]
        fn lock_keys_read_back(name in "[a-z:%{}/*?\\[\\] é\\\\]{1,12}", cut in 0usize..12) {
            let keys = Keys::new("p", &name);
            let read = lock_of_key("p", keys.lock.as_bytes());
            prop_assert_eq!(read.map(|(n, k)| (n.as_str().to_string(), k)), Some((name.clone(), LockKind::Mutex)));
            let chars: Vec<char> = name.chars().collect();
            let prefix: String = chars[..cut.min(chars.len())].iter().collect();
            prop_assert!(glob_matches(&scan_pattern("p", &prefix), &keys.lock));
        }
    }

    /// Redis's glob for the patterns [`scan_pattern`] writes: literal
    /// characters, `\\`-escapes and one trailing `*`.
    fn glob_matches(pattern: &str, key: &str) -> bool {
        let literal = pattern.strip_suffix('*').expect("a trailing star");
        let mut unescaped = String::new();
        let mut chars = literal.chars();
        while let Some(c) = chars.next() {
            unescaped.push(if c == '\\' { chars.next().unwrap() } else { c });
        }
        key.starts_with(&unescaped)
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
