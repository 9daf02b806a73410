//! `omnilock write FILE`: a fenced write for shell jobs. A stale token is
//! refused with exit 73 and the file kept; racing processes end with the
//! highest token's output; under `omnilock run` the token comes from the
//! environment.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use omnilock_harness::deadline::{RunBounded, WaitBounded};
use omnilock_harness::process::{WithoutTerminal, scratch_dir, sqlite_store, text};

const OMNILOCK: &str = env!("CARGO_BIN_EXE_omnilock");

fn scratch(test: &str) -> PathBuf {
    scratch_dir(Path::new(env!("CARGO_TARGET_TMPDIR")).join("write"), test)
}

/// `omnilock write FILE` (with `args` before FILE) fed `input`.
fn write(file: &Path, args: &[&str], input: &str) -> Output {
    let mut child = Command::new(OMNILOCK)
        .arg("write")
        .args(args)
        .arg(file)
        .env_remove("OMNILOCK_TOKEN")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .without_terminal()
        .spawn()
        .expect("start omnilock write");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(input.as_bytes())
        .expect("feed stdin");
    child.output_or_fail("omnilock write ends")
}

fn contents(file: &Path) -> String {
    std::fs::read_to_string(file).expect("the file")
}

#[test]
fn a_stale_token_is_refused_and_the_file_kept() {
    let file = scratch("stale").join("report.csv");
    assert_eq!(
        write(&file, &["--token", "5"], "five\n").status.code(),
        Some(0)
    );
    assert_eq!(
        write(&file, &["--token", "7"], "seven\n").status.code(),
        Some(0)
    );
    // The same holder writes again.
    assert_eq!(
        write(&file, &["--token", "7"], "seven again\n")
            .status
            .code(),
        Some(0)
    );

    let stale = write(&file, &["--token", "5"], "stale\n");
    assert_eq!(stale.status.code(), Some(73), "{}", text(&stale.stderr));
    let message = text(&stale.stderr);
    assert!(
        message.contains("fencing token 5 is older than 7"),
        "{message}"
    );
    assert_eq!(contents(&file), "seven again\n");
    assert_eq!(contents(&file.with_extension("csv.fence")).trim(), "7");
}

#[test]
fn without_a_token_nothing_is_written() {
    let dir = scratch("no-token");
    let file = dir.join("out");
    let out = write(&file, &[], "data\n");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("OMNILOCK_TOKEN"));
    assert!(!file.exists());

    let mut bad = Command::new(OMNILOCK);
    bad.args(["write", file.to_str().unwrap()])
        .env("OMNILOCK_TOKEN", "twelve")
        .stdin(Stdio::null())
        .without_terminal();
    let out = bad.output_or_fail("run");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(!file.exists());
}

/// Sixteen processes write at once, each with its own token. Writers take
/// turns under the lock file, so none can slip a stale write between
/// another's check and its rename: the file ends with the highest token's
/// output, the fence at that token, and every writer exits 0 or 73.
#[test]
fn racing_writers_end_with_the_highest_tokens_output() {
    let file = scratch("race").join("state.json");
    let writers: Vec<_> = (1..=16u64)
        .rev()
        .map(|token| {
            let mut child = Command::new(OMNILOCK)
                .args(["write", "--token", &token.to_string()])
                .arg(&file)
                .stdin(Stdio::piped())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .without_terminal()
                .spawn()
                .expect("start a writer");
            let mut stdin = child.stdin.take().expect("stdin");
            (
                token,
                child,
                stdin.write_all(format!("{{\"token\":{token}}}\n").as_bytes()),
            )
        })
        .collect();
    for (token, child, fed) in writers {
        fed.expect("feed a writer");
        let out = child.output_or_fail("a writer ends");
        assert!(
            matches!(out.status.code(), Some(0 | 73)),
            "token {token}: {:?} {}",
            out.status,
            text(&out.stderr)
        );
        if token == 16 {
            assert_eq!(
                out.status.code(),
                Some(0),
                "the highest token is never refused"
            );
        }
    }
    assert_eq!(contents(&file), "{\"token\":16}\n");
    assert_eq!(contents(&file.with_extension("json.fence")).trim(), "16");
}

/// Under `omnilock run`, the job's output goes through `omnilock write`
/// with the token `run` gave it; a later holder's output then refuses the
/// earlier job's late write.
#[test]
fn under_run_the_token_comes_from_the_environment() {
    let dir = scratch("under-run");
    let store = sqlite_store(&dir);
    let file = dir.join("report.txt");
    let job = |line: &str| {
        Command::new(OMNILOCK)
            .args(["run", "--store", &store, "report", "--"])
            .args([
                "sh",
                "-c",
                &format!("echo {line} | \"$OMNILOCK\" write \"$FILE\"; echo $OMNILOCK_TOKEN"),
            ])
            .env("OMNILOCK", OMNILOCK)
            .env("FILE", &file)
            .env_remove("OMNILOCK_STORE")
            .stdin(Stdio::null())
            .without_terminal()
            .output_or_fail("run omnilock")
    };
    let first = job("first");
    assert_eq!(first.status.code(), Some(0), "{}", text(&first.stderr));
    let first_token: u64 = text(&first.stdout).trim().parse().expect("the job's token");
    let second = job("second");
    assert_eq!(second.status.code(), Some(0), "{}", text(&second.stderr));
    assert_eq!(contents(&file), "second\n");

    // The first job, paused past its lease, wakes and writes late.
    let late = write(&file, &["--token", &first_token.to_string()], "late\n");
    assert_eq!(late.status.code(), Some(73), "{}", text(&late.stderr));
    assert_eq!(contents(&file), "second\n");
}

/// A replaced file keeps its permissions: a report made private stays so.
#[test]
fn the_replaced_file_keeps_its_permissions() {
    use std::os::unix::fs::PermissionsExt;
    let file = scratch("permissions").join("private.txt");
    assert_eq!(
        write(&file, &["--token", "1"], "one\n").status.code(),
        Some(0)
    );
    std::fs::set_permissions(&file, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    assert_eq!(
        write(&file, &["--token", "2"], "two\n").status.code(),
        Some(0)
    );
    let mode = std::fs::metadata(&file)
        .expect("metadata")
        .permissions()
        .mode();
    assert_eq!(mode & 0o777, 0o600, "mode {mode:o}");
    assert_eq!(contents(&file), "two\n");
}

/// A path that cannot be written is refused with a status of its own and
/// leaves nothing beside it; the OS's reason is said once.
#[test]
fn an_unwritable_path_is_refused_cleanly() {
    let dir = scratch("unwritable");
    let out = write(&dir, &["--token", "1"], "x\n");
    assert_eq!(out.status.code(), Some(64), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("is a directory"));
    let fence = dir.with_extension("fence");
    assert!(!fence.exists(), "nothing is created beside a directory");

    let missing = dir.join("no-such-dir").join("file");
    let out = write(&missing, &["--token", "1"], "x\n");
    assert_eq!(out.status.code(), Some(74), "{}", text(&out.stderr));
    let message = text(&out.stderr);
    assert_eq!(message.matches("No such file").count(), 1, "{message}");
}
