#!/usr/bin/env bash
# The project's test command (README): starts the test stores, runs every
# test of every crate with all features, then the examples, and stops the
# stores, also on failure. Under this script a backend test whose store is
# missing fails.
#
# With arguments (a test filter, `-p CRATE`...), one `cargo test` runs them.
#
# Without, every test binary comes from one build, and the suites run in two
# lanes side by side, since most of their time is spent waiting on stores:
#   sql     the SQL crate's binaries (MariaDB, PostgreSQL, SQLite), then the
#           doc tests and the examples (cargo runs only here: it holds its
#           build directory's lock while it runs);
#   others  every other crate's binaries (etcd, ZooKeeper, Redis, the CLI,
#           the facade), then the fault tests that take etcd, ZooKeeper and
#           Redis nodes down (the sql lane does not use those stores).
# Then, alone: what takes SQL stores down or faults every store (the
# MariaDB restart test, the chaos run). Each lane's output is printed when
# it ends; target/test-times lists every binary's wall time.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"

# A caller that started the stores itself (CI does, beside its builds: the
# first start installs the Debian packages) says so with
# OMNILOCK_STORES_STARTED=1; they are stopped at the end all the same.
if [ "${OMNILOCK_STORES_STARTED:-}" != 1 ]; then
  scripts/stores.sh up
fi
trap 'scripts/stores.sh down' EXIT
# shellcheck disable=SC1091
source target/stores/env
unset OMNILOCK_TEST_ALLOW_MISSING

if [ $# -gt 0 ]; then
  cargo test --workspace --all-features --no-fail-fast "$@"
  exit
fi

# The binaries that take stores down, by crate and test name: they run
# after the suites that use the same stores.
FAULTS_OTHERS="omnilock-redis/failover omnilock-redis/redlock_faults omnilock-etcd/etcd_faults omnilock-zookeeper/zk_faults"
FAULTS_ALONE="omnilock-sql/restart omnilock-chaos/short_run"

# One build of every test binary, and cargo's own report of what it built:
# one line "LANE PACKAGE PACKAGE_DIR NAME EXECUTABLE" per test binary.
cargo test --workspace --all-features --no-run --message-format=json-render-diagnostics \
  >target/test-build.json
FAULTS_OTHERS=$FAULTS_OTHERS FAULTS_ALONE=$FAULTS_ALONE python3 - >target/test-binaries <<'EOF'
import json, os
others = set(os.environ["FAULTS_OTHERS"].split())
alone = set(os.environ["FAULTS_ALONE"].split())
for line in open("target/test-build.json"):
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable") or not m["profile"]["test"]:
        continue
    package_dir = os.path.dirname(m["manifest_path"])
    package = os.path.basename(package_dir) if package_dir != os.getcwd() else "omnilock"
    key = f"{package}/{m['target']['name']}"
    if key in alone:
        lane = "alone"
    elif key in others:
        lane = "faults"
    elif package == "omnilock-sql":
        lane = "sql"
    else:
        lane = "others"
    print(lane, package, package_dir, m["target"]["name"], m["executable"])
EOF
for lane in sql others faults alone; do
  if ! grep -q "^$lane " target/test-binaries; then
    echo "test.sh: no test binary in lane $lane (cargo's report changed?)" >&2
    exit 1
  fi
done

: >target/test-times

# run_lane LANE: runs the lane's binaries one after another, as cargo would
# (from the package's directory); fails if any fails.
run_lane() {
  local lane=$1 status=0 _lane package dir name exe start
  while read -r _lane package dir name exe; do
    [ "$_lane" = "$lane" ] || continue
    echo "     Running $name ($exe)"
    start=$SECONDS
    (cd "$dir" && CARGO_MANIFEST_DIR=$dir "$exe") || status=1
    echo "$((SECONDS - start)) s $lane $package/$name" >>target/test-times
  done <target/test-binaries
  return "$status"
}

run_docs() {
  local status=0 example start=$SECONDS
  cargo test --workspace --all-features --doc --no-fail-fast || status=1
  echo "$((SECONDS - start)) s docs doc tests" >>target/test-times
  # The examples assert their own outcome; `cargo test` built them.
  for example in examples/*.rs; do
    example=$(basename "$example" .rs)
    echo "example $example"
    target/debug/examples/"$example" >/dev/null || status=1
  done
  return "$status"
}

failed=0
(
  status=0
  run_lane sql || status=1
  run_docs || status=1
  exit "$status"
) >target/test-sql.log 2>&1 &
sql=$!
(
  status=0
  run_lane others || status=1
  run_lane faults || status=1
  exit "$status"
) >target/test-others.log 2>&1 &
others=$!
for lane in sql others; do
  wait "${!lane}" || failed=1
  echo "--- lane $lane"
  cat "target/test-$lane.log"
done

run_lane alone || failed=1
echo "--- wall time per test binary (s)"
sort -rn target/test-times
exit "$failed"
