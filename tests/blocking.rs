//! The blocking conformance scenarios (`omnilock_testkit::blocking`) through
//! `omnilock::blocking`, on the in-memory store and on SQLite, as trials
//! `<store>::<scenario>` (`harness = false`: scenarios a store does not
//! claim show as ignored). The scenarios run on plain threads: no async
//! runtime is involved.

use omnilock_testkit::blocking::BlockingSubject;

fn mem() -> BlockingSubject {
    BlockingSubject::url("mem (blocking)", "mem://blocking-conformance")
}

/// A fresh database file per test run, in a temporary directory (the
/// scenarios use unique lock names, so they share it safely).
#[cfg(feature = "sqlite")]
fn sqlite() -> BlockingSubject {
    use std::path::PathBuf;
    use std::sync::OnceLock;

    static PATH: OnceLock<PathBuf> = OnceLock::new();
    let path = PATH.get_or_init(|| {
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
    });
    BlockingSubject::url("sqlite (blocking)", format!("sqlite://{}", path.display()))
}

omnilock_testkit::blocking_main!(
    mem => mem(),
    #[cfg(feature = "sqlite")]
    sqlite => sqlite(),
);
