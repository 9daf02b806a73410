//! `omnilock-chaos run` refuses bad input before starting any client: a
//! typed message, exit status 2, no secret in the output, nothing written
//! but the output directory. Needs no store server (SQLite files, and a port
//! nothing listens on).

use std::process::{Command, Output};

fn chaos(args: &[&str]) -> Output {
    let out = std::env::temp_dir().join(format!("omnilock-chaos-bad-{}", std::process::id()));
    Command::new(env!("CARGO_BIN_EXE_omnilock-chaos"))
        .args(args)
        .arg("--out")
        .arg(&out)
        .output()
        .expect("run omnilock-chaos")
}

fn refused(args: &[&str], says: &str) {
    let output = chaos(args);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
    assert!(
        stderr.contains(says),
        "{args:?}: expected {says:?} in {stderr}"
    );
    assert!(
        !stderr.contains("sekret"),
        "a password was printed: {stderr}"
    );
    assert!(
        output.stdout.is_empty(),
        "{args:?} ran: {}",
        String::from_utf8_lossy(&output.stdout)
    );
}

fn sqlite() -> String {
    let file = std::env::temp_dir().join(format!("omnilock-chaos-bad-{}.db", std::process::id()));
    format!("sqlite://{}", file.display())
}

#[test]
fn bad_input_is_refused_before_any_client_starts() {
    let db = sqlite();
    refused(&["run", "--store", "nosuch://x"], "scheme");
    refused(&["run", "--store", "redis://:sekret@127.0.0.1:1"], "redis");
    refused(&["run", "--store", &db, "--ttl", "0s"], "--ttl");
    refused(
        &["run", "--store", &db, "--fault", "partition"],
        "no network node",
    );
    refused(&["run", "--store", &db, "--fault", "node"], "sqlite");
    refused(&["run", "--store", &db, "--fault", "clock"], "redlock");
    refused(
        &["run", "--store", &db, "--primitive", "multi"],
        "--locks 2 or more",
    );
    refused(
        &["run", "--store", &db, "--fault", "minority"],
        "no network node",
    );
    refused(
        &["run", "--store", &db, "--fault", "majority-restart"],
        "sqlite",
    );
    refused(
        &[
            "run",
            "--store",
            "redlock://:sekret@127.0.0.1:1,127.0.0.1:2,127.0.0.1:3/",
        ],
        "",
    );
}

#[test]
fn bad_flags_are_usage_errors() {
    let output = chaos(&["run", "--store", "sqlite:///tmp/x.db", "--duration", "soon"]);
    assert_eq!(output.status.code(), Some(2));
    let output = chaos(&["run", "--store", "sqlite:///tmp/x.db", "--clients", "0"]);
    assert_eq!(output.status.code(), Some(2));
    let output = chaos(&["run", "--store", "sqlite:///tmp/x.db", "--fault", "meteor"]);
    assert_eq!(output.status.code(), Some(2));
    for (primitive, says) in [
        ("semaphore:0", "from 1"),
        ("semaphore:many", "from 1"),
        ("barrier", "mutex, semaphore:N, rw or multi"),
    ] {
        let output = chaos(&[
            "run",
            "--store",
            "sqlite:///tmp/x.db",
            "--primitive",
            primitive,
        ]);
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{primitive}: {stderr}");
        assert!(stderr.contains(says), "{primitive}: {stderr}");
    }
}
