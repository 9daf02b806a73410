#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features (most test binaries two at a time,
# those that fault or count shared servers alone), then the examples, and
# stops the stores, also on failure.
# Under this script a backend test whose store is missing fails.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# The stores start while the tests build: each takes a minute or two, and
# the stores mostly wait for their own processes to come up.
mkdir -p target
scripts/stores.sh up >target/stores-up.log 2>&1 &
stores=$!
trap 'wait "$stores" 2>/dev/null; scripts/stores.sh down' EXIT

# One build of the whole workspace, shared by every test binary; cargo's
# report of it names each test binary and its package.
cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >target/test-build.json
if ! wait "$stores"; then
  cat target/stores-up.log >&2
  echo "test.sh: the stores did not start" >&2
  exit 1
fi
cat target/stores-up.log
# shellcheck disable=SC1091
source target/stores/env
unset OMNILOCK_TEST_ALLOW_MISSING

# With arguments (a filter, `-p crate`, ...), cargo runs what they select.
if [ $# -gt 0 ]; then
  cargo test --workspace --all-features --no-fail-fast "$@"
  exit
fi

# Test binaries that break or skew what other tests see while they run:
# they kill, pause, restart or fail over shared servers, or count a
# server's requests. Each runs alone, after the others.
ALONE=(
  crates/omnilock-chaos/tests/short_run.rs
  crates/omnilock-redis/tests/failover.rs
  crates/omnilock-redis/tests/redlock_faults.rs
  crates/omnilock-redis/tests/herd.rs
  crates/omnilock-etcd/tests/etcd_faults.rs
  crates/omnilock-etcd/tests/herd.rs
  crates/omnilock-zookeeper/tests/zk_faults.rs
  crates/omnilock-zookeeper/tests/herd.rs
  crates/omnilock-sql/tests/restart.rs
)
# The longest of the others start first, so that the lanes end together.
FIRST=(
  crates/omnilock-sql/tests/conformance.rs
  crates/omnilock-etcd/tests/conformance.rs
  crates/omnilock-etcd/tests/byo_client.rs
  crates/omnilock-cli/tests/cli.rs
)
# How many of the others run at once. They mostly wait on the stores, but
# share 2 cores with them: 2 lanes take about half the time of one.
LANES=${OMNILOCK_TEST_LANES:-2}

# "<source> <package dir> <binary>" for each test binary of the build.
binaries=$(grep '"reason":"compiler-artifact"' target/test-build.json |
  grep -E '"profile":\{[^}]*"test":true' | grep -v '"executable":null' |
  sed -E 's/.*"manifest_path":"([^"]*)\/Cargo.toml".*"src_path":"([^"]*)".*"executable":"([^"]*)".*/\2 \1 \3/' |
  sed "s#^$ROOT/##" | sort)
in_list() {
  local item=$1
  shift
  for x in "$@"; do [ "$x" = "$item" ] && return 0; done
  return 1
}
for source in "${ALONE[@]}"; do
  if ! grep -q "^$source " <<<"$binaries"; then
    echo "test.sh: no test binary $source (renamed? update ALONE)" >&2
    exit 1
  fi
done
together=()
alone=()
for first in "${FIRST[@]}"; do
  if ! entry=$(grep "^$first " <<<"$binaries"); then
    echo "test.sh: no test binary $first (renamed? update FIRST)" >&2
    exit 1
  fi
  together+=("$entry")
done
while read -r source dir binary; do
  if in_list "$source" "${ALONE[@]}"; then
    alone+=("$source $dir $binary")
  elif ! in_list "$source" "${FIRST[@]}"; then
    together+=("$source $dir $binary")
  fi
done <<<"$binaries"

# Runs one test binary in its package's directory, as cargo would, with its
# output in target/test-logs; prints one line, and the whole output on a
# failure.
mkdir -p target/test-logs
run_binary() {
  local source=$1 dir=$2 binary=$3
  local log started=$SECONDS
  log=target/test-logs/$(tr / _ <<<"$source").log
  if (cd "$dir" && CARGO_MANIFEST_DIR=$dir "$binary") >"$log" 2>&1; then
    echo "test.sh: [$SECONDS s] ok $source ($((SECONDS - started)) s): $(grep -h '^test result' "$log" | tail -1)"
  else
    echo "test.sh: [$SECONDS s] FAILED $source ($((SECONDS - started)) s)"
    cat "$log"
    return 1
  fi
}

failed=0
running=0
for entry in "${together[@]}"; do
  if [ "$running" -ge "$LANES" ]; then
    wait -n || failed=1
    running=$((running - 1))
  fi
  # shellcheck disable=SC2086 # the entry is three words, none with spaces
  run_binary $entry &
  running=$((running + 1))
done
# The doc tests build and run beside the binaries.
(cargo test -q --workspace --all-features --doc >target/test-logs/doctests.log 2>&1 &&
  echo "test.sh: [$SECONDS s] ok doc tests") ||
  { echo "test.sh: FAILED doc tests"; cat target/test-logs/doctests.log; exit 1; } &
running=$((running + 1))
while [ "$running" -gt 0 ]; do
  wait -n || failed=1
  running=$((running - 1))
done
for entry in "${alone[@]}"; do
  # shellcheck disable=SC2086
  run_binary $entry || failed=1
done

# The examples run too (each asserts its own outcome); `cargo test` built
# them with these features, so this builds nothing new.
for example in examples/*.rs; do
  example=$(basename "$example" .rs)
  echo "example $example"
  cargo run -q --all-features --example "$example" >/dev/null || failed=1
done

if [ "$failed" -ne 0 ]; then
  echo "test.sh: some tests failed (see above)" >&2
  exit 1
fi
echo "test.sh: every test passed"
