//! Interoperation with Apache Curator on one ZooKeeper path: a Java program
//! (tests/curator/CuratorDriver.java, compiled here with `javac` against
//! Debian's Curator jars, which `scripts/stores.sh` installs) takes a
//! Curator mutex, semaphore permit, read lock or write lock again and again
//! while omnilock tasks contend for the same name. Both sides mark a shared
//! directory while they hold (exclusive slot files, reader and writer
//! files); an overlap the lock should have prevented is a violation, on
//! either side.

use std::io::ErrorKind as IoErrorKind;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::Duration;

use omnilock_core::{Locks, StoreUrl};
use omnilock_testkit::store_url;
use omnilock_zookeeper::{ZkConfig, ZkStore};
use tokio::io::{AsyncBufReadExt, BufReader};

/// The jars the driver needs, from Debian's `libcurator-*-java` and
/// `zookeeper` packages.
const JARS: &[&str] = &[
    "curator-recipes.jar",
    "curator-framework.jar",
    "curator-client.jar",
    "zookeeper.jar",
    "zookeeper-jute.jar",
    "guava.jar",
    "slf4j-api.jar",
];

fn classpath() -> String {
    let jars: Vec<String> = JARS
        .iter()
        .map(|jar| {
            let path = Path::new("/usr/share/java").join(jar);
            assert!(
                path.exists(),
                "{} is missing: `scripts/stores.sh up` installs libcurator-recipes-java \
                 (and the JDK); run it as root or install them",
                path.display()
            );
            path.display().to_string()
        })
        .collect();
    jars.join(":")
}

/// Compiles the driver once per test binary run; returns the class path.
fn driver() -> String {
    static COMPILED: std::sync::OnceLock<String> = std::sync::OnceLock::new();
    COMPILED
        .get_or_init(|| {
            let jars = classpath();
            let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("curator-driver");
            std::fs::create_dir_all(&out).expect("driver directory");
            let source = concat!(
                env!("CARGO_MANIFEST_DIR"),
                "/tests/curator/CuratorDriver.java"
            );
            let status = std::process::Command::new("javac")
                .args(["-d", &out.display().to_string(), "-cp", &jars, source])
                .status()
                .expect("javac runs (package default-jdk-headless)");
            assert!(status.success(), "javac failed on {source}");
            format!("{}:{jars}", out.display())
        })
        .clone()
}

fn rand_suffix() -> String {
    format!("{:08x}", rand::random::<u32>())
}

#[derive(Clone, Copy, Debug)]
enum Side {
    Mutex,
    Permit(u32),
    Read,
    Write,
}

/// The shared directory protocol: what a holder of `side` does while it
/// holds. Panics on a violation.
async fn inside(dir: &Path, side: Side) {
    let hold = Duration::from_millis(3);
    match side {
        Side::Mutex | Side::Permit(_) => {
            let permits = if let Side::Permit(n) = side { n } else { 1 };
            for k in 0..permits {
                let slot = dir.join(format!("slot-{k}"));
                match std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .open(&slot)
                {
                    Ok(_) => {
                        tokio::time::sleep(hold).await;
                        std::fs::remove_file(&slot).expect("remove slot");
                        return;
                    }
                    Err(e) if e.kind() == IoErrorKind::AlreadyExists => continue,
                    Err(e) => panic!("slot file: {e}"),
                }
            }
            panic!("VIOLATION: more than {permits} holders");
        }
        Side::Read => {
            let mine = dir.join(format!("reader-{}", rand_suffix()));
            std::fs::File::create(&mine).expect("reader file");
            assert!(
                !dir.join("writer").exists(),
                "VIOLATION: a reader beside a writer"
            );
            tokio::time::sleep(hold).await;
            std::fs::remove_file(&mine).expect("remove reader file");
        }
        Side::Write => {
            let writer = dir.join("writer");
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(&writer)
            {
                Ok(_) => {}
                Err(e) if e.kind() == IoErrorKind::AlreadyExists => {
                    panic!("VIOLATION: two writers")
                }
                Err(e) => panic!("writer file: {e}"),
            }
            let readers = std::fs::read_dir(dir)
                .expect("list")
                .filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with("reader-"));
            assert!(!readers, "VIOLATION: a writer beside a reader");
            tokio::time::sleep(hold).await;
            std::fs::remove_file(&writer).expect("remove writer file");
        }
    }
}

async fn take(locks: &Locks, name: &str, side: Side) -> omnilock_core::LockGuard {
    let timeout = Duration::from_secs(60);
    let request = match side {
        Side::Mutex => locks.lock(name),
        Side::Permit(n) => locks.semaphore(name, n),
        Side::Read => locks.rw_lock(name).read(),
        Side::Write => locks.rw_lock(name).write(),
    };
    request
        .timeout(timeout)
        .acquire()
        .await
        .expect("omnilock acquires")
}

/// Runs the Curator drivers (`java_modes`) and omnilock tasks (`ours`, on
/// two clients) on one name until every driver is done.
async fn contend(label: &str, java_modes: &[&str], ours: &[Side]) {
    let url = store_url("ZK").expect("OMNILOCK_TEST_ZK_URL");
    let config = ZkConfig::from_url(&StoreUrl::parse(&url).unwrap()).unwrap();
    let name = format!("curator-{label}-{}", rand_suffix());
    let path = format!("{}/{name}", config.options.prefix.trim_end_matches('/'));
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(&name);
    std::fs::create_dir_all(&dir).expect("shared directory");
    let classpath = driver();
    let clients = [
        Locks::new(ZkStore::connect(config.clone()).await.expect("connect")),
        Locks::new(ZkStore::connect(config.clone()).await.expect("connect")),
    ];

    let mut drivers = Vec::new();
    for mode in java_modes {
        let mut child = tokio::process::Command::new("java")
            .args(["-cp", &classpath, "CuratorDriver", &config.hosts, &path])
            .args([mode, "40", &dir.display().to_string()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("java runs");
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let started = tokio::time::timeout(Duration::from_secs(60), lines.next_line())
            .await
            .expect("the Curator driver connects within a minute")
            .expect("driver output");
        assert_eq!(started.as_deref(), Some("STARTED"), "{mode}");
        drivers.push((mode, child, lines));
    }

    let done = Arc::new(AtomicBool::new(false));
    let rounds = Arc::new(AtomicU32::new(0));
    let mut tasks = Vec::new();
    for (i, side) in ours.iter().enumerate() {
        let (locks, side) = (clients[i % 2].clone(), *side);
        let (name, dir, done, rounds) = (name.clone(), dir.clone(), done.clone(), rounds.clone());
        tasks.push(tokio::spawn(async move {
            while !done.load(Ordering::SeqCst) {
                let guard = take(&locks, &name, side).await;
                inside(&dir, side).await;
                guard.release().await.expect("release");
                rounds.fetch_add(1, Ordering::SeqCst);
            }
        }));
    }
    for (mode, mut child, mut lines) in drivers {
        let status = tokio::time::timeout(Duration::from_secs(120), child.wait())
            .await
            .expect("the Curator driver ends within two minutes")
            .expect("wait");
        let mut output = Vec::new();
        while let Ok(Some(line)) = lines.next_line().await {
            output.push(line);
        }
        assert!(
            status.success() && output.iter().any(|l| l == "DONE 40"),
            "Curator driver {mode}: {status}, output {output:?}"
        );
    }
    done.store(true, Ordering::SeqCst);
    for task in tasks {
        task.await.expect("an omnilock task saw no violation");
    }
    assert!(
        rounds.load(Ordering::SeqCst) > 0,
        "omnilock took the lock while Curator ran"
    );
    let _ = std::fs::remove_dir_all(&dir);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_and_omnilock_share_a_mutex() {
    contend("mutex", &["mutex", "mutex"], &[Side::Mutex; 4]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_and_omnilock_share_a_semaphore() {
    contend(
        "semaphore",
        &["semaphore:2", "semaphore:2"],
        &[Side::Permit(2); 4],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn curator_and_omnilock_share_a_read_write_lock() {
    contend(
        "rw",
        &["read", "write"],
        &[Side::Read, Side::Write, Side::Read, Side::Read],
    )
    .await;
}
