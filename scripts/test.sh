#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features, then the examples, and stops the
# stores, also on failure.
# Under this script a backend test whose store is missing fails.
#
# With arguments (a test filter, `-p CRATE`...), one `cargo test` runs them.
# Without, the suites run in three steps on one shared build:
#   1. the build of every test binary;
#   2. side by side: the SQL crate's suites (the longest, on MariaDB,
#      PostgreSQL and SQLite only) and every other crate's suites (on the
#      other stores; the tests that take nodes down there touch no SQL
#      store);
#   3. alone, the suites that take SQL stores down or fault every store:
#      the MariaDB restart test and the chaos run; then the examples.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

scripts/stores.sh up
trap 'scripts/stores.sh down' EXIT
# shellcheck disable=SC1091
source target/stores/env
unset OMNILOCK_TEST_ALLOW_MISSING

if [ $# -gt 0 ]; then
  cargo test --workspace --all-features --no-fail-fast "$@"
  exit
fi

# 1. One build of the whole workspace, shared by every test binary.
cargo test --workspace --all-features --no-run

# 2. The SQL suites beside the rest; the SQL output is printed after.
failed=0
sql_log=target/test-sql.log
cargo test -p omnilock-sql --all-features --no-fail-fast -- \
  --skip holder_keeps_lock_across_mariadb_restart >"$sql_log" 2>&1 &
sql=$!
cargo test --workspace --all-features --no-fail-fast \
  --exclude omnilock-sql --exclude omnilock-chaos || failed=1
wait "$sql" || failed=1
echo "--- omnilock-sql (run beside the suites above)"
cat "$sql_log"

# 3. Alone: what takes stores down.
cargo test -p omnilock-sql --all-features --test restart || failed=1
cargo test -p omnilock-chaos --all-features --no-fail-fast || failed=1

# The examples run too (each asserts its own outcome); `cargo test` built
# them with these features, so this builds nothing new.
for example in examples/*.rs; do
  example=$(basename "$example" .rs)
  echo "example $example"
  cargo run -q --all-features --example "$example" >/dev/null || failed=1
done
exit "$failed"
