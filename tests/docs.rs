//! The docs say what the code does: every option a store's `from_url` reads
//! is on that store's page, and every scheme `connect` knows is in the
//! README, the crate docs and the unknown-scheme error.
//!
//! Options are collected from the code, not from a list kept by hand:
//! [`StoreUrl::consulted_options`] records each name a reader asks for,
//! given or not.

use omnilock::SCHEMES;
use omnilock::raw::StoreUrl;

fn read(path: &str) -> String {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// The options `read_options` consults for `url`, which must parse.
fn consulted(url: &str, read_options: impl FnOnce(&StoreUrl)) -> Vec<String> {
    let parsed = StoreUrl::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    read_options(&parsed);
    parsed.consulted_options()
}

/// Fails naming every option of `options` that `page` does not show as
/// `` `name` ``.
fn assert_documented(page: &str, what: &str, options: &[String]) {
    assert!(
        !options.is_empty(),
        "{what}: no option consulted; is the check still wired?"
    );
    let text = read(page);
    let missing: Vec<&String> = options
        .iter()
        .filter(|option| !text.contains(&format!("`{option}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "{page} does not document {what} option(s) {missing:?}"
    );
}

#[cfg(feature = "redis")]
#[test]
fn redis_options_are_documented() {
    use omnilock::redis::RedisConfig;
    for url in [
        "redis://h:6379",
        "rediss://h:6379",
        "redlock://a:1,b:2,c:3/",
    ] {
        let options = consulted(url, |u| {
            let _ = RedisConfig::from_url(u);
        });
        assert_documented("docs/backends/redis.md", url, &options);
    }
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_options_are_documented() {
    use omnilock::etcd::EtcdConfig;
    for url in [
        "etcd://h:2379/app",
        "etcds://h:2379/app",
        "etcd://h:2379/app?mode=lockapi",
    ] {
        let options = consulted(url, |u| {
            let _ = EtcdConfig::from_url(u);
        });
        assert_documented("docs/backends/etcd.md", url, &options);
    }
}

#[cfg(feature = "zookeeper")]
#[test]
fn zookeeper_options_are_documented() {
    use omnilock::zookeeper::ZkConfig;
    for url in ["zk://h:2181/app", "zookeeper://u:p@h:2181/app"] {
        let options = consulted(url, |u| {
            let _ = ZkConfig::from_url(u);
        });
        assert_documented("docs/backends/zookeeper.md", url, &options);
    }
}

#[cfg(all(feature = "mysql", feature = "postgres", feature = "sqlite"))]
#[test]
fn sql_options_are_documented() {
    use omnilock::sql::SqlConfig;
    for url in [
        "sqlite:///tmp/x.db",
        "postgres://u:p@h:5432/db",
        "mysql://u:p@h:3306/db",
        "postgres://u:p@h:5432/db?sslmode=require",
        "mysql://u:p@h:3306/db?ssl-mode=REQUIRED",
    ] {
        let options = consulted(url, |u| {
            let _ = SqlConfig::from_url(u);
        });
        assert_documented("docs/backends/sql.md", url, &options);
    }
}

/// `ttl` and the mem store's options are read by `connect` itself.
#[test]
fn common_options_are_documented() {
    let options = consulted("mem://", |u| {
        let mut u = u.clone();
        let _ = u.take_duration("ttl");
        let _ = omnilock::MemStore::from_url(&u);
    });
    assert_documented("README.md", "common", &options);
}

/// Each scheme shows as `scheme://` in the README's store table and the crate
/// docs (the rustdoc table), and the unknown-scheme error lists it.
#[tokio::test]
async fn every_scheme_is_in_the_readme_the_crate_docs_and_the_error() {
    let readme = read("README.md");
    let crate_docs = read("src/lib.rs");
    let err = omnilock::connect("nosuch://h")
        .await
        .unwrap_err()
        .to_string();
    for (scheme, _) in SCHEMES {
        let shown = format!("`{scheme}://");
        assert!(
            readme.contains(&shown),
            "README.md does not show {scheme}://"
        );
        assert!(
            crate_docs.contains(&shown),
            "the crate docs do not show {scheme}://"
        );
        let known = err.split_once("known: ").map_or("", |(_, list)| list);
        assert!(
            known.split([',', ' ']).any(|word| word == *scheme),
            "the unknown-scheme error does not list {scheme}: {err}"
        );
    }
}

/// A scheme whose feature is compiled out names that feature; one whose
/// feature is in never says "unknown".
#[tokio::test]
async fn every_scheme_is_known_to_connect() {
    for (scheme, feature) in SCHEMES {
        // Port 9 (discard) on loopback with tiny timeouts: nothing connects,
        // which is not what this checks.
        let url = format!("{scheme}://127.0.0.1:9/x?connect_timeout=50ms");
        let message = match omnilock::connect(&url).await {
            Ok(_) => continue,
            Err(err) => err.to_string(),
        };
        assert!(
            !message.contains("unknown store scheme"),
            "{scheme}: {message}"
        );
        if let Some(feature) = feature
            && message.contains("needs the cargo feature")
        {
            assert!(
                message.contains(&format!("`{feature}`")),
                "{scheme}: {message}"
            );
        }
    }
}

/// The rows of the Markdown table whose header line starts with `header`,
/// each split into its cells (the separator row left out).
fn table_rows(page: &str, header: &str) -> Vec<Vec<String>> {
    let mut lines = page.lines().skip_while(|line| !line.starts_with(header));
    let mut rows = Vec::new();
    while let Some(line) = lines.next().filter(|line| line.starts_with('|')) {
        let cells: Vec<String> = line
            .trim()
            .trim_matches('|')
            .split('|')
            .map(|cell| cell.trim().to_string())
            .collect();
        if !cells.iter().all(|cell| cell.chars().all(|c| c == '-')) {
            rows.push(cells);
        }
    }
    assert!(!rows.is_empty(), "no table headed {header:?}");
    rows
}

/// The `code spans` of a Markdown cell.
fn code_spans(cell: &str) -> Vec<&str> {
    cell.split('`').skip(1).step_by(2).collect()
}

/// The test store for a URL pattern of the capability matrix, such as
/// `postgres://…?fair=false`: the test URL of its kind, under the pattern's
/// scheme, with the pattern's options added.
/// `None` for a scheme without a test store of its own.
#[cfg(feature = "full")]
fn matrix_url(pattern: &str, sqlite_dir: &std::path::Path) -> Option<String> {
    let (scheme, rest) = pattern.split_once("://").expect("a scheme");
    let options = rest.split_once('?').map(|(_, options)| options);
    let base = match scheme {
        "mem" => "mem://".to_string(),
        "sqlite" => format!("sqlite://{}/matrix.db", sqlite_dir.display()),
        _ => {
            let store = match scheme {
                "etcd" => "ETCD",
                "etcds" => "ETCD_TLS",
                "zk" | "zookeeper" => "ZK",
                "zks" => "ZK_TLS",
                "redis" => "REDIS",
                "rediss" => "REDIS_TLS",
                "redis+sentinel" => "REDIS_SENTINEL",
                "redis+cluster" => "REDIS_CLUSTER",
                "rediss+cluster" => "REDIS_CLUSTER_TLS",
                // No Sentinel over TLS among the test stores: its
                // capabilities come from the same code as `redis+sentinel`.
                "rediss+sentinel" => return None,
                "redlock" => "REDLOCK",
                "postgres" | "postgresql" => "POSTGRES",
                "mysql" | "mariadb" => "MYSQL",
                other => panic!("the capability matrix names {other}://, which has no test store"),
            };
            let url = omnilock_testkit::store_url(store)
                .unwrap_or_else(|| panic!("OMNILOCK_TEST_{store}_URL is not set"));
            let (_, after) = url.split_once("://").expect("a test URL has a scheme");
            // Generous: the test connects some 25 stores, TLS ones too, on
            // a machine that runs other suites beside it.
            let joiner = if after.contains('?') { '&' } else { '?' };
            format!("{scheme}://{after}{joiner}connect_timeout=15s")
        }
    };
    Some(match options {
        None => base,
        Some(options) if base.contains('?') => format!("{base}&{options}"),
        Some(options) => format!("{base}?{options}"),
    })
}

/// docs/semantics.md §7's matrix is the product's spec: every row is
/// connected to a real store of that kind (and mode), and each flag must be
/// what `capabilities()` reports. Every scheme has a row, and every flag a
/// column. docs/observability.md's `store` label values are the kinds these
/// stores report.
#[cfg(feature = "full")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_capability_matrix_is_what_stores_report() {
    let rows = table_rows(&read("docs/semantics.md"), "| store URL |");
    let flags: Vec<&str> = omnilock::Capabilities::default()
        .flags()
        .iter()
        .map(|(flag, _)| *flag)
        .collect();
    assert_eq!(
        rows[0][1..],
        flags,
        "the matrix's columns are not the flags"
    );
    let sqlite_dir = std::env::temp_dir().join(format!("omnilock-matrix-{}", std::process::id()));
    std::fs::create_dir_all(&sqlite_dir).expect("a directory for SQLite");
    let mut wrong = Vec::new();
    let mut schemes = std::collections::BTreeSet::new();
    let mut kinds = std::collections::BTreeSet::new();
    for row in &rows[1..] {
        for pattern in code_spans(&row[0]) {
            schemes.insert(pattern.split("://").next().unwrap_or_default().to_string());
            let Some(url) = matrix_url(pattern, &sqlite_dir) else {
                continue;
            };
            let locks = omnilock::connect(&url)
                .await
                .unwrap_or_else(|e| panic!("{pattern}: cannot connect: {e}"));
            kinds.insert(locks.backend_kind());
            for ((flag, on), cell) in locks.capabilities().flags().iter().zip(&row[1..]) {
                let documented = match cell.as_str() {
                    "yes" => true,
                    "no" => false,
                    other => panic!("{pattern} {flag}: {other:?} is neither yes nor no"),
                };
                if documented != *on {
                    wrong.push(format!(
                        "{pattern} {flag}: the docs say {cell}, the store says {on}"
                    ));
                }
            }
            locks.close().await;
        }
    }
    let _ = std::fs::remove_dir_all(&sqlite_dir);
    assert!(
        wrong.is_empty(),
        "docs/semantics.md §7 disagrees with the stores:\n{}",
        wrong.join("\n")
    );
    for (scheme, _) in omnilock::SCHEMES {
        assert!(
            schemes.contains(*scheme),
            "the capability matrix has no row for {scheme}://"
        );
    }
    let labels = table_rows(&read("docs/observability.md"), "| label |");
    let store = labels
        .iter()
        .find(|row| row[0] == "`store`")
        .expect("observability.md documents the `store` label");
    // The values are the spans that are a kind's shape (not the method).
    let documented: std::collections::BTreeSet<&str> = code_spans(&store[2])
        .into_iter()
        .filter(|span| span.chars().all(|c| c.is_ascii_lowercase() || c == '-'))
        .collect();
    let reported: std::collections::BTreeSet<&str> = kinds.into_iter().collect();
    assert_eq!(
        documented, reported,
        "docs/observability.md's `store` label values are not the stores' kinds"
    );
}

/// Every "Rust 1.N" in the user docs is the workspace's `rust-version`.
#[test]
fn the_docs_name_the_msrv_the_manifest_declares() {
    let msrv = env!("CARGO_PKG_RUST_VERSION");
    assert!(!msrv.is_empty(), "the manifest declares no rust-version");
    let mut pages = user_pages();
    pages.push("src/lib.rs".to_string());
    let mut wrong = Vec::new();
    for page in &pages {
        let text = read(page);
        for (at, _) in text.match_indices("Rust 1.") {
            let version: String = text[at + 5..]
                .chars()
                .take_while(|c| c.is_ascii_digit() || *c == '.')
                .collect();
            let version = version.trim_end_matches('.');
            if version != msrv && !msrv.starts_with(&format!("{version}.")) {
                wrong.push(format!("{page}: Rust {version}"));
            }
        }
    }
    assert!(wrong.is_empty(), "the MSRV is {msrv}, yet: {wrong:?}");
}

/// The MSRV holds for what a user builds: every crate of the workspace
/// inherits it (so clippy's `incompatible_msrv` lint, which CI denies,
/// checks each against it), and no dependency in the lock file declares a
/// newer Rust. This machine has one toolchain, so no older compiler can
/// build the workspace here; these two checks are the stand-in.
#[test]
fn every_crate_and_dependency_builds_on_the_msrv() {
    let msrv = env!("CARGO_PKG_RUST_VERSION");
    // "1.94" and "1.94.0" are one version.
    let version = |v: &str| -> [u32; 3] {
        let mut parts = v.split('.').map(|n| n.parse().unwrap_or(0));
        [(); 3].map(|_| parts.next().unwrap_or(0))
    };
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_string());
    let out = std::process::Command::new(cargo)
        .args([
            "metadata",
            "--format-version",
            "1",
            "--all-features",
            "--offline",
        ])
        .args(["--filter-platform", "x86_64-unknown-linux-gnu"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // JSON is YAML: the YAML parser the tests already use reads it.
    let meta: serde_yaml::Value = serde_yaml::from_slice(&out.stdout).expect("metadata parses");
    let members: Vec<&str> = meta["workspace_members"]
        .as_sequence()
        .expect("workspace_members")
        .iter()
        .filter_map(|m| m.as_str())
        .collect();
    let resolved: Vec<&str> = meta["resolve"]["nodes"]
        .as_sequence()
        .expect("resolve.nodes")
        .iter()
        .filter_map(|n| n["id"].as_str())
        .collect();
    let mut wrong = Vec::new();
    for package in meta["packages"].as_sequence().expect("packages") {
        let id = package["id"].as_str().unwrap_or_default();
        let name = package["name"].as_str().unwrap_or_default();
        let declared = package["rust_version"].as_str();
        if members.contains(&id) {
            if declared != Some(msrv) {
                wrong.push(format!(
                    "{name} declares rust-version {declared:?}, not {msrv}"
                ));
            }
        } else if resolved.contains(&id)
            && let Some(declared) = declared
            && version(declared) > version(msrv)
        {
            wrong.push(format!("the dependency {name} needs Rust {declared}"));
        }
    }
    assert!(members.len() > 5, "the workspace's members were found");
    assert!(wrong.is_empty(), "the MSRV is {msrv}, yet: {wrong:?}");
}

/// The user pages: the README and every page under docs/.
fn user_pages() -> Vec<String> {
    let mut pages = vec!["README.md".to_string()];
    for dir in ["docs", "docs/backends"] {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(dir);
        for entry in std::fs::read_dir(&path).expect("the docs directory") {
            let name = entry.expect("a docs entry").file_name();
            let name = name.to_string_lossy();
            if name.ends_with(".md") {
                pages.push(format!("{dir}/{name}"));
            }
        }
    }
    pages
}

/// The user pages speak of the product, not of how it was made: no commit
/// hashes, no issue numbers of this project, no dated change notes. (History
/// is in CHANGELOG.md. Upstream issues are cited as `owner/repo#N` or
/// "etcd issue N", with a link.)
#[test]
fn the_user_pages_carry_no_history() {
    let mut found = Vec::new();
    for page in user_pages() {
        let text = read(&page);
        for (n, line) in text.lines().enumerate() {
            let at = format!("{page}:{}", n + 1);
            let lower = line.to_lowercase();
            for phrase in [
                "until 2026",
                "since 2026",
                "before 2026",
                "after 2026",
                "the issue's",
                "scratch",
                "our machines",
                "first version",
                "earlier version",
            ] {
                if lower.contains(phrase) {
                    found.push(format!("{at}: \"{phrase}\""));
                }
            }
            // A commit hash: a word of 7 to 40 hex digits, letters and
            // digits both (so neither a number nor an English word).
            for word in line.split(|c: char| !c.is_ascii_alphanumeric()) {
                let hex = word
                    .chars()
                    .all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c));
                if (7..=40).contains(&word.len())
                    && hex
                    && word.chars().any(|c| c.is_ascii_digit())
                    && word.chars().any(|c| c.is_ascii_alphabetic())
                {
                    found.push(format!("{at}: commit-like {word}"));
                }
            }
            // "#18": an issue number after a space or parenthesis. Anchors
            // (`#7-fairness`) go on with a dash, upstream `owner/repo#N` has
            // a name before the `#`.
            let bytes = line.as_bytes();
            for (i, _) in line.match_indices('#') {
                let before = i.checked_sub(1).map(|j| bytes[j]);
                let digits = line[i + 1..]
                    .chars()
                    .take_while(char::is_ascii_digit)
                    .count();
                let after = line[i + 1 + digits..].chars().next();
                if digits > 0 && matches!(before, None | Some(b' ' | b'(')) && after != Some('-') {
                    found.push(format!("{at}: issue-like {}", &line[i..i + 1 + digits]));
                }
            }
        }
    }
    assert!(
        found.is_empty(),
        "history in the user pages:\n{}",
        found.join("\n")
    );
}
