#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features, then the examples, and stops the
# stores, also on failure.
# Under this script a backend test whose store is missing fails.
#
# With arguments (a test filter, `-p CRATE`...), one `cargo test` runs them.
# Without, the suites run in three steps on one shared build:
#   1. the build of every test binary;
#   2. side by side: the SQL crate's test binaries (the longest suites, on
#      MariaDB, PostgreSQL and SQLite only), run directly, and every other
#      crate's suites through cargo (on the other stores; the tests that
#      take nodes down there touch no SQL store). cargo holds its build
#      directory's lock while tests run, so only one side can be cargo;
#   3. alone, what takes SQL stores down or faults every store (the
#      MariaDB restart test, the chaos run), the SQL doc tests, then the
#      examples.
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

# 1. One build of the whole workspace, shared by every test binary; the
# SQL crate's test executables from cargo's own report of what it built.
cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >target/test-build.json
python3 - >target/test-sql-binaries <<'EOF'
import json
for line in open("target/test-build.json"):
    try:
        message = json.loads(line)
    except ValueError:
        continue
    if (message.get("reason") == "compiler-artifact"
            and message.get("executable")
            and message["profile"]["test"]
            and "/crates/omnilock-sql#" in message["package_id"]):
        print(message["executable"])
EOF
if [ ! -s target/test-sql-binaries ]; then
  echo "test.sh: found no test binary of omnilock-sql in cargo's report" >&2
  exit 1
fi

# 2. The SQL binaries beside the rest; their output is printed after.
failed=0
sql_log=target/test-sql.log
(
  status=0
  cd crates/omnilock-sql
  while read -r binary; do
    echo "     Running $binary"
    "$binary" --skip holder_keeps_lock_across_mariadb_restart || status=1
  done <"$ROOT/target/test-sql-binaries"
  exit "$status"
) >"$sql_log" 2>&1 &
sql=$!
cargo test --workspace --all-features --no-fail-fast \
  --exclude omnilock-sql --exclude omnilock-chaos || failed=1
wait "$sql" || failed=1
echo "--- omnilock-sql (run beside the suites above)"
cat "$sql_log"

# 3. Alone: what takes stores down, and the SQL doc tests.
cargo test -p omnilock-sql --all-features --test restart || failed=1
cargo test -p omnilock-sql --all-features --doc || failed=1
cargo test -p omnilock-chaos --all-features --no-fail-fast || failed=1

# The examples run too (each asserts its own outcome); `cargo test` built
# them with these features, so this builds nothing new.
for example in examples/*.rs; do
  example=$(basename "$example" .rs)
  echo "example $example"
  cargo run -q --all-features --example "$example" >/dev/null || failed=1
done
exit "$failed"
