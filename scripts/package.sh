#!/usr/bin/env bash
# Packages every publishable crate as crates.io would receive it, then builds
# a scratch project outside the workspace on the packaged crates (not on the
# workspace's sources) and takes a lock on SQLite with it. Catches a package
# that leaves out a file it needs, a dependency without a version, or a
# feature that only builds inside the workspace.
#
#   scripts/package.sh      (CI runs it; about a minute on a warm target/)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# The tools (benchmarks, fault harness, test probes) say `publish = false`.
excluded=()
for manifest in crates/*/Cargo.toml; do
  if grep -q '^publish = false' "$manifest"; then
    excluded+=(--exclude "$(sed -n 's/^name = "\(.*\)"/\1/p' "$manifest" | head -1)")
  fi
done
cargo package --workspace "${excluded[@]}" --no-verify --allow-dirty 2>&1 |
  grep -v '^warning: ignoring \(test\|example\|benchmark\)' || true
test -s target/package/omnilock-0.1.0.crate

out=target/package/check
rm -rf "$out"
mkdir -p "$out/crates" "$out/scratch/src"
for crate in target/package/*.crate; do
  tar xzf "$crate" -C "$out/crates"
done

# The scratch project depends on the facade by version, as a user would;
# [patch] points each omnilock crate at its package, since none is on
# crates.io yet. The workspace's lock file keeps the dependencies at the
# versions the workspace built, so the shared target/ already has most.
{
  echo '[package]'
  echo 'name = "omnilock-scratch"'
  echo 'version = "0.0.0"'
  echo 'edition = "2024"'
  echo 'publish = false'
  echo '[workspace]'
  echo '[dependencies]'
  echo 'omnilock = { version = "0.1.0", features = ["sqlite"] }'
  echo 'tokio = { version = "1", features = ["macros", "rt-multi-thread"] }'
  echo '[patch.crates-io]'
  for dir in "$out"/crates/*/; do
    name=$(basename "$dir")
    echo "${name%-*} = { path = \"../crates/$name\" }"
  done
} >"$out/scratch/Cargo.toml"
cp Cargo.lock "$out/scratch/Cargo.lock"
cat >"$out/scratch/src/main.rs" <<'RUST'
//! A user's first program, on the packaged crates.
#[tokio::main]
async fn main() -> Result<(), omnilock::Error> {
    let dir = std::env::temp_dir().join(format!("omnilock-scratch-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    let locks = omnilock::connect(&format!("sqlite://{}/locks.db", dir.display())).await?;
    let guard = locks.acquire("scratch/first").await?;
    assert!(guard.token() >= 1);
    assert!(locks.try_acquire("scratch/first").await?.is_none(), "the lock excludes");
    guard.release().await?;
    assert!(locks.try_acquire("scratch/first").await?.is_some(), "the release freed it");
    locks.close().await;
    std::fs::remove_dir_all(&dir).ok();
    println!("the packaged omnilock took and released a lock on SQLite");
    Ok(())
}
RUST
CARGO_TARGET_DIR="$ROOT/target" cargo run -q --manifest-path "$out/scratch/Cargo.toml" 2>&1 |
  grep -v '^warning: Patch `' | grep -v '^Check that the patched' | grep -v 'was not used in the crate graph' || true
