#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features, then the examples, and stops the
# stores, also on failure.
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
# messages list the binaries for scripts/test-lanes.sh.
cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >target/test-binaries.json
if ! wait "$stores"; then
  cat target/stores-up.log >&2
  echo "test.sh: the stores did not start" >&2
  exit 1
fi
cat target/stores-up.log
# shellcheck disable=SC1091
source target/stores/env
unset OMNILOCK_TEST_ALLOW_MISSING

# With arguments (a filter, `-p CRATE`), cargo runs what they select;
# without, every binary runs in the lanes of scripts/test-lanes.sh, the
# documentation tests included.
if [ $# -gt 0 ]; then
  cargo test --workspace --all-features --no-fail-fast "$@"
else
  scripts/test-lanes.sh <target/test-binaries.json
fi

# The examples run too (each asserts its own outcome); `cargo test` built
# them with these features, so this builds nothing new. Skipped when the
# caller filters tests.
if [ $# -eq 0 ]; then
  for example in examples/*.rs; do
    example=$(basename "$example" .rs)
    echo "example $example"
    cargo run -q --all-features --example "$example" >/dev/null
  done
fi
