#!/usr/bin/env bash
# Runs the test binaries one build made (the JSON messages of
# `cargo test --no-run --message-format=json`, on standard input) one after
# another, or with OMNILOCK_TEST_LANES=2 in two lanes at once, then the
# ones that need the machine to themselves:
#
#   sql lane   the SQL crate's binaries (its conformance suite is the longest
#              by far), then, once the main lane's store faults are over,
#              the CLI's (they use every store);
#   main lane  first the tests that stop nodes of etcd, Redis or ZooKeeper
#              (`*_faults`, `failover`) or count a store's requests (`herd`),
#              one after another, beside nothing else that uses those stores;
#              then every other binary, then the documentation tests;
#   alone      binaries that stop or kill servers every suite uses (the
#              MariaDB restart, the chaos run), or time what they measure
#              (the benchmark's test), each with nothing beside it.
#
# A test run mostly waits (for a lease to run out, a poll, a server), so two
# lanes keep a 2-CPU machine busier than one: about 120 s less on 2 CPUs,
# but renewals and timed fault scenarios then ran late now and then (an
# etcd renewal, a Redlock late grant), so one lane is the default; two are
# for machines with more CPUs. Each binary runs as
# `cargo test` runs it (from its package's directory, with
# CARGO_MANIFEST_DIR, standard input empty), its output kept apart and
# printed whole when it ends. Exits non-zero if any binary failed, or if
# fewer binaries ran than cargo listed, after running them all.
#
#   scripts/test-lanes.sh < target/test-binaries.json   (scripts/test.sh)
set -uo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
logs=$ROOT/target/test-lanes
rm -rf "$logs"
mkdir -p "$logs"
CARGO=${CARGO:-$(command -v cargo)}
export CARGO

# One line per test executable: package directory, a label, the executable.
# cargo prints one JSON object per line; a test executable is an artifact
# built with the test profile ("test":true closes the profile object).
binaries=$logs/binaries
grep '"reason":"compiler-artifact"' |
  grep '"overflow_checks":[a-z]*,"test":true}' |
  grep '"executable":"/' |
  sed -E 's/.*"manifest_path":"([^"]*)\/Cargo.toml".*"target":\{"kind":\["([^"]*)"[^]]*\][^}]*"name":"([^"]*)".*"executable":"([^"]*)".*/\1 \3(\2) \4/' \
    >"$binaries"
if [ ! -s "$binaries" ] || grep -qv '^/' "$binaries"; then
  echo "test-lanes: no test executables in cargo's messages" >&2
  exit 1
fi

# Runs a command (label, directory, command...) and prints its output when
# it ends; records a failure.
run() {
  local label=$1 dir=$2 log started status
  shift 2
  log=$logs/${label//[^A-Za-z0-9_.-]/_}.log
  started=$SECONDS
  (cd "$dir" && "$@") </dev/null >"$log" 2>&1
  status=$?
  echo "$label" >>"$logs/ran"
  {
    flock 9
    echo "     Running $label ($*)"
    cat "$log"
    echo "test-lanes: $label: exit $status after $((SECONDS - started)) s"
  } 9>"$logs/.print"
  if [ "$status" -ne 0 ]; then
    echo "$label (exit $status)" >>"$logs/failed"
  fi
}

# Runs the binaries listed in file $1 one after another, as `cargo test`
# runs them.
lane() {
  local dir label exe package args
  while read -r dir label exe; do
    package=$(basename "$dir")
    [ "$dir" = "$ROOT" ] && package=omnilock
    args=()
    # The SQL conformance suite (13 subjects, the longest binary) mostly
    # waits on polls and leases: five trials at a time on 2 CPUs took
    # 212-239 s where the default three took 291 s, and passed 3 runs of 3
    # (eight at a time made a renewal late).
    [ "$package $label" = "omnilock-sql conformance(test)" ] && args=(--test-threads 5)
    run "$package $label" "$dir" env CARGO_MANIFEST_DIR="$dir" CARGO_PKG_NAME="$package" "$exe" "${args[@]}"
  done <"$1"
}

alone='/omnilock-sql restart\(test\)|/omnilock-chaos short_run\(test\)|/omnilock-chaos soak\(test\)|/omnilock-bench bench\(test\)'
faults=' ([a-z]+_faults|failover|herd)\(test\)'
grep -E "$alone" "$binaries" >"$logs/alone"
grep -vE "$alone" "$binaries" >"$logs/rest"
{
  grep -E '/omnilock-sql conformance\(test\)' "$logs/rest"
  grep -E '/omnilock-sql ' "$logs/rest" | grep -vE 'conformance\(test\)'
} >"$logs/sql"
grep -E '/omnilock-cli ' "$logs/rest" >"$logs/cli"
grep -vE '/omnilock-(sql|cli) ' "$logs/rest" | grep -E "$faults" >"$logs/faults"
grep -vE '/omnilock-(sql|cli) ' "$logs/rest" | grep -vE "$faults" >"$logs/main"

if [ "${OMNILOCK_TEST_LANES:-1}" = 2 ]; then
  {
    lane "$logs/sql"
    # The CLI's tests use every store: not beside a fault or herd test.
    while [ ! -e "$logs/faults-done" ]; do sleep 1; done
    lane "$logs/cli"
  } &
  sql=$!
  lane "$logs/faults"
  touch "$logs/faults-done"
  lane "$logs/main"
  run "doc tests" "$ROOT" "$CARGO" test --workspace --all-features --doc
  wait "$sql"
else
  # One lane (the default): on 2 CPUs, two lanes made renewals and timed
  # fault scenarios late enough to fail now and then.
  for list in faults main sql cli; do
    lane "$logs/$list"
  done
  run "doc tests" "$ROOT" "$CARGO" test --workspace --all-features --doc
fi
lane "$logs/alone"

listed=$(wc -l <"$binaries")
ran=$(grep -cv '^doc tests$' "$logs/ran")
if [ "$ran" -ne "$listed" ]; then
  echo "test-lanes: cargo listed $listed test binaries and $ran ran" >>"$logs/failed"
fi
if [ -s "$logs/failed" ]; then
  echo "test-lanes: failed:" >&2
  sed 's/^/  /' "$logs/failed" >&2
  exit 1
fi
echo "test-lanes: every test binary passed ($listed binaries, and the doc tests)"
