//! What the clients of a run take: the mutex (the default), permits of one
//! semaphore per name, the two sides of one read-write lock per name, or
//! two mutexes at once through `lock_all`.

use std::fmt;
use std::str::FromStr;

use omnilock::{LockRequest, Locks};
use rand::Rng;

/// `--primitive`: `mutex`, `semaphore:N`, `rw` or `multi`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Primitive {
    /// One holder per lock; the fenced register checks the holders.
    #[default]
    Mutex,
    /// A semaphore of N permits per name.
    Semaphore(u32),
    /// A read-write lock per name; one acquisition in four is a writer.
    Rw,
    /// Two of the mutexes at once, through `lock_all`, named in a random
    /// order; the fenced register checks each.
    Multi,
}

impl Primitive {
    /// A request for one acquisition of `name` (for `Rw`, a writer one
    /// time in four), and its share as the checker counts it:
    /// `(weight, capacity)`, `None` for the mutex.
    pub fn request<'a>(
        self,
        locks: &'a Locks,
        name: &str,
    ) -> (LockRequest<'a>, Option<(u64, u64)>) {
        let side = match self {
            Primitive::Mutex | Primitive::Multi => return (locks.lock(name), None),
            Primitive::Semaphore(permits) => {
                let request = locks.semaphore(name, permits);
                return (
                    request,
                    share(omnilock::raw::Primitive::Semaphore { permits }),
                );
            }
            Primitive::Rw if rand::thread_rng().gen_ratio(1, 4) => omnilock::raw::Primitive::Write,
            Primitive::Rw => omnilock::raw::Primitive::Read,
        };
        let lock = locks.rw_lock(name);
        let request = if side == omnilock::raw::Primitive::Write {
            lock.write()
        } else {
            lock.read()
        };
        (request, share(side))
    }

    /// The requests that together fill all of `name` (every permit, or the
    /// write side): taking them all proves nothing was left behind.
    pub fn fill<'a>(self, locks: &'a Locks, name: &str) -> Vec<LockRequest<'a>> {
        match self {
            Primitive::Mutex | Primitive::Multi => vec![locks.lock(name)],
            Primitive::Semaphore(permits) => (0..permits)
                .map(|_| locks.semaphore(name, permits))
                .collect(),
            Primitive::Rw => vec![locks.rw_lock(name).write()],
        }
    }
}

fn share(primitive: omnilock::raw::Primitive) -> Option<(u64, u64)> {
    primitive.share().map(|s| (s.weight, s.capacity))
}

impl FromStr for Primitive {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text {
            "mutex" => Ok(Primitive::Mutex),
            "rw" => Ok(Primitive::Rw),
            "multi" => Ok(Primitive::Multi),
            _ => {
                let permits = text.strip_prefix("semaphore:").ok_or_else(|| {
                    format!("unknown primitive {text:?}: use mutex, semaphore:N, rw or multi")
                })?;
                match permits.parse::<u32>() {
                    Ok(n) if n > 0 => Ok(Primitive::Semaphore(n)),
                    _ => Err(format!(
                        "semaphore:{permits}: the permits must be a whole number from 1"
                    )),
                }
            }
        }
    }
}

impl fmt::Display for Primitive {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Primitive::Mutex => f.write_str("mutex"),
            Primitive::Semaphore(n) => write!(f, "semaphore:{n}"),
            Primitive::Rw => f.write_str("rw"),
            Primitive::Multi => f.write_str("multi"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_and_prints() {
        for text in ["mutex", "semaphore:3", "rw", "multi"] {
            assert_eq!(text.parse::<Primitive>().unwrap().to_string(), text);
        }
        for bad in [
            "semaphore:0",
            "semaphore:",
            "semaphore:-1",
            "sem:2",
            "RW",
            "",
        ] {
            assert!(bad.parse::<Primitive>().is_err(), "{bad}");
        }
    }
}
