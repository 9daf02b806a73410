//! The blocking API (`src/blocking/`) and the async API it wraps
//! (`omnilock-core`'s client, guard, election and multi-lock types, and the
//! facade's `connect`) offer the same public methods, type by type. The test
//! reads both sources and compares the names of their `pub fn`s; the only
//! differences allowed are the ones listed in [`DIFFERENCES`], each with its
//! reason. A method added on one side only fails it until the twin is
//! written or the difference is listed here.
//!
//! It also checks that every public function and type of the blocking API
//! has a doc comment with an example.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// Which API a method is on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Side {
    Async,
    Blocking,
}

/// The intended differences: (type, method, the only side that has it, why).
/// The type `fn` stands for free functions.
const DIFFERENCES: &[(&str, &str, Side, &str)] = &[
    // A blocking handle is made by `blocking::connect`, which also starts
    // the runtime the handle needs; there is no backend to wrap by hand.
    ("Locks", "new", Side::Async, "made by blocking::connect"),
    (
        "Locks",
        "from_arc",
        Side::Async,
        "made by blocking::connect",
    ),
    // A TTL check shared by both APIs through the crate root.
    ("fn", "check_ttl", Side::Async, "shared by both APIs"),
    // The loss: the async API returns a future to await or select on; the
    // blocking API offers the same signal as a channel and as a callback.
    ("LockGuard", "lost", Side::Async, "a future"),
    (
        "LockGuard",
        "lost_receiver",
        Side::Blocking,
        "the loss as a channel",
    ),
    (
        "LockGuard",
        "on_lost",
        Side::Blocking,
        "the loss as a callback",
    ),
    ("Leadership", "lost", Side::Async, "a future"),
    (
        "Leadership",
        "lost_receiver",
        Side::Blocking,
        "the loss as a channel",
    ),
    (
        "Leadership",
        "on_lost",
        Side::Blocking,
        "the loss as a callback",
    ),
    ("MultiGuard", "lost", Side::Async, "a future"),
    (
        "MultiGuard",
        "lost_receiver",
        Side::Blocking,
        "the loss as a channel",
    ),
    (
        "MultiGuard",
        "on_lost",
        Side::Blocking,
        "the loss as a callback",
    ),
];

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The sources of the async API: the types the blocking API wraps.
fn async_sources() -> Vec<PathBuf> {
    let core = root().join("crates/omnilock-core/src");
    let mut files: Vec<PathBuf> = [
        "client.rs",
        "request.rs",
        "guard.rs",
        "election.rs",
        "multi.rs",
    ]
    .iter()
    .map(|file| core.join(file))
    .collect();
    files.push(root().join("src/lib.rs"));
    files
}

/// Every source file of the blocking API.
fn blocking_sources() -> Vec<PathBuf> {
    let dir = root().join("src/blocking");
    let mut files: Vec<PathBuf> = std::fs::read_dir(&dir)
        .expect("src/blocking")
        .map(|entry| entry.expect("directory entry").path())
        .filter(|path| path.extension().is_some_and(|e| e == "rs"))
        .collect();
    files.sort();
    files
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The name at the start of `text` (an identifier).
fn ident(text: &str) -> String {
    text.chars()
        .take_while(|c| c.is_alphanumeric() || *c == '_')
        .collect()
}

/// The type of an inherent `impl` line (`impl<'a> LockRequest<'a> {`), or
/// `None` for a trait impl.
fn impl_type(line: &str) -> Option<String> {
    let mut rest = line.strip_prefix("impl")?;
    if rest.starts_with('<') {
        let mut depth = 0;
        let end = rest
            .char_indices()
            .find(|&(_, c)| {
                match c {
                    '<' => depth += 1,
                    '>' => depth -= 1,
                    _ => {}
                }
                depth == 0
            })
            .map(|(i, _)| i)?;
        rest = &rest[end + 1..];
    }
    if rest.contains(" for ") {
        return None;
    }
    Some(ident(rest.trim_start()))
}

/// The name of a public function declared on `line`, if it declares one
/// (`pub fn`, `pub async fn`; not `pub(crate)`), at the indentation given.
fn public_fn(line: &str, indent: &str) -> Option<String> {
    let rest = line.strip_prefix(indent)?;
    let rest = rest
        .strip_prefix("pub fn ")
        .or_else(|| rest.strip_prefix("pub async fn "))?;
    Some(ident(rest))
}

/// The public methods of each type with an inherent `impl` in `files`, and
/// the free public functions under the type `fn`. A macro that writes
/// methods (`option_setters!`, `holding_methods!`) is invoked in the `impl`
/// as `name! {` with the methods it writes listed on the next line, up to
/// a `;`: those count as declared there.
fn public_methods(files: &[PathBuf]) -> BTreeMap<String, BTreeSet<String>> {
    let mut methods: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for file in files {
        let mut current: Option<String> = None;
        let mut written_by_macro = false;
        for line in read(file).lines() {
            if std::mem::take(&mut written_by_macro) {
                if let (Some(ty), Some((listed, _))) = (&current, line.split_once(';')) {
                    let entry = methods.entry(ty.clone()).or_default();
                    entry.extend(listed.split(',').map(|name| name.trim().to_string()));
                }
            } else if line.starts_with("impl") {
                current = impl_type(line);
            } else if line == "}" {
                current = None;
            } else if let Some(name) = public_fn(line, "") {
                methods.entry("fn".into()).or_default().insert(name);
            } else if let (Some(ty), Some(name)) = (&current, public_fn(line, "    ")) {
                methods.entry(ty.clone()).or_default().insert(name);
            } else if current.is_some() && line.starts_with("    ") && line.ends_with("! {") {
                written_by_macro = true;
            }
        }
    }
    methods
}

/// The differences between the two APIs that [`DIFFERENCES`] does not
/// list, and the listed ones that are no longer there, as messages.
fn unlisted_differences(
    asynchronous: &BTreeMap<String, BTreeSet<String>>,
    blocking: &BTreeMap<String, BTreeSet<String>>,
) -> Vec<String> {
    let empty = BTreeSet::new();
    let types: BTreeSet<&String> = asynchronous.keys().chain(blocking.keys()).collect();
    let mut found = BTreeSet::new();
    for ty in types {
        let a = asynchronous.get(ty).unwrap_or(&empty);
        let b = blocking.get(ty).unwrap_or(&empty);
        for method in a.difference(b) {
            found.insert((ty.clone(), method.clone(), Side::Async));
        }
        for method in b.difference(a) {
            found.insert((ty.clone(), method.clone(), Side::Blocking));
        }
    }
    let listed: BTreeSet<(String, String, Side)> = DIFFERENCES
        .iter()
        .map(|&(ty, method, side, _)| (ty.to_string(), method.to_string(), side))
        .collect();
    let mut messages: Vec<String> = found
        .difference(&listed)
        .map(|(ty, method, side)| {
            let (has, lacks) = match side {
                Side::Async => ("async", "blocking"),
                Side::Blocking => ("blocking", "async"),
            };
            format!("{ty}::{method} is on the {has} API but not on the {lacks} one")
        })
        .collect();
    messages.extend(
        listed.difference(&found).map(|(ty, method, _)| {
            format!("{ty}::{method} is listed as a difference but is not one")
        }),
    );
    messages
}

#[test]
fn blocking_and_async_apis_have_the_same_methods() {
    let asynchronous = public_methods(&async_sources());
    let blocking = public_methods(&blocking_sources());
    // The reading works: the main types and methods are found on both sides.
    for (ty, method) in [
        ("Locks", "lock_all"),
        ("Locks", "election"),
        ("LockRequest", "acquire"),
        ("LockRequest", "options"),
        ("Candidate", "timeout"),
        ("MultiGuard", "is_held"),
        ("Election", "observe"),
        ("Observer", "changed"),
        ("MultiGuard", "release"),
        ("fn", "connect"),
    ] {
        for (side, methods) in [("async", &asynchronous), ("blocking", &blocking)] {
            assert!(
                methods.get(ty).is_some_and(|m| m.contains(method)),
                "{ty}::{method} not found on the {side} side: the source reading is broken"
            );
        }
    }
    let differences = unlisted_differences(&asynchronous, &blocking);
    assert!(
        differences.is_empty(),
        "the blocking API and the async API drifted apart (write the twin, or list an \
         intended difference in DIFFERENCES in tests/blocking_parity.rs):\n  {}",
        differences.join("\n  ")
    );
}

/// The comparison notices a method missing on either side, and a listed
/// difference that has gone.
#[test]
fn a_missing_twin_is_noticed() {
    let asynchronous = public_methods(&async_sources());
    let blocking = public_methods(&blocking_sources());
    let mut without = blocking.clone();
    without.get_mut("Locks").unwrap().remove("lock_all");
    assert_eq!(
        unlisted_differences(&asynchronous, &without),
        ["Locks::lock_all is on the async API but not on the blocking one"]
    );
    let mut without = asynchronous.clone();
    without.get_mut("Candidate").unwrap().remove("timeout");
    assert_eq!(
        unlisted_differences(&without, &blocking),
        ["Candidate::timeout is on the blocking API but not on the async one"]
    );
    let mut with = blocking.clone();
    with.get_mut("Locks").unwrap().insert("new".into());
    assert_eq!(
        unlisted_differences(&asynchronous, &with),
        ["Locks::new is listed as a difference but is not one"]
    );
}

/// Every `pub fn` and `pub struct` of the blocking API has a doc comment
/// with an example (a code block).
#[test]
fn every_public_blocking_item_has_an_example() {
    let mut missing = Vec::new();
    let mut seen = 0;
    for file in blocking_sources() {
        let source = read(&file);
        let lines: Vec<&str> = source.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let trimmed = line.trim_start();
            let item = trimmed.starts_with("pub fn ")
                || trimmed.starts_with("pub async fn ")
                || trimmed.starts_with("pub struct ");
            if !item {
                continue;
            }
            seen += 1;
            // The doc comment above, past attributes.
            let docs: Vec<&str> = lines[..i]
                .iter()
                .rev()
                .map(|l| l.trim_start())
                .skip_while(|l| l.starts_with("#["))
                .take_while(|l| l.starts_with("///"))
                .collect();
            if !docs.iter().any(|l| l.starts_with("/// ```")) {
                let name = file.file_name().unwrap().to_string_lossy();
                missing.push(format!("{name}:{}: {trimmed}", i + 1));
            }
        }
    }
    assert!(
        seen > 50,
        "only {seen} public items found: the reading is broken"
    );
    assert!(
        missing.is_empty(),
        "public blocking items without an example in their docs:\n  {}",
        missing.join("\n  ")
    );
}
