//! The blocking conformance scenarios (`omnilock_testkit::blocking`) through
//! `omnilock::blocking`, on the in-memory store and on SQLite. The tests
//! themselves run on plain threads: no async runtime is involved.

mod mem {
    use omnilock_testkit::blocking::BlockingSubject;

    fn subject() -> BlockingSubject {
        BlockingSubject::url("mem (blocking)", "mem://blocking-conformance")
    }

    omnilock_testkit::blocking_tests!(subject());
}

#[cfg(feature = "sqlite")]
mod sqlite {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    use omnilock_testkit::blocking::BlockingSubject;

    /// One database file per test run, in a fresh temporary directory (the
    /// scenarios use unique lock names, so they share it safely).
    fn database() -> &'static PathBuf {
        static PATH: OnceLock<PathBuf> = OnceLock::new();
        PATH.get_or_init(|| {
            let dir = std::env::temp_dir().join(format!(
                "omnilock-blocking-{}-{}",
                std::process::id(),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos())
                    .unwrap_or(0)
            ));
            std::fs::create_dir_all(&dir).expect("a temporary directory");
            dir.join("locks.db")
        })
    }

    fn subject() -> BlockingSubject {
        let url = format!("sqlite://{}", database().display());
        BlockingSubject::url("sqlite (blocking)", url)
    }

    omnilock_testkit::blocking_tests!(subject());
}
