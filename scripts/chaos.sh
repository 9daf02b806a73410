#!/usr/bin/env bash
# The long chaos run behind docs/reliability.md: every store under each fault
# class on its own, then one markdown table of the figures.
#
#   scripts/chaos.sh [DURATION]      default 2m per run; the stores must be up
#                                    (scripts/stores.sh up)
#   CHAOS_FILTER=REGEX               only the runs whose label matches
#   CHAOS_KEEP=1                     keep earlier results in target/chaos-long
#
# Each run: 16 client processes, TTL 2 s, work under the lock 0-2 s (as the
# issue that specified the harness asked), one fault class. "1lock" runs put
# every client on one lock, so each fault hits a lock others are waiting for
# (kill: the time to the next grant is a recovery time); "100locks" runs
# spread the clients over 100 locks for more acquisitions per minute.
# "unfenced" runs use a register that accepts stale writes, to count what
# fencing saves. Results: target/chaos-long/<label>/ (history.jsonl,
# report.json, client logs) and target/chaos-long/table.md.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DURATION=${1:-2m}
OUT=target/chaos-long
FILTER=${CHAOS_FILTER:-.}
# shellcheck disable=SC1091
source target/stores/env
cargo build --release -q -p omnilock-chaos
CHAOS=target/release/omnilock-chaos
[ "${CHAOS_KEEP:-0}" = 1 ] || rm -rf "$OUT"
mkdir -p "$OUT"

# run STORE URL FAULT LOCKS REGISTER
run() {
  local store=$1 url=$2 fault=$3 locks=$4 register=$5
  local label="$store-$fault-${locks}lock-$register"
  [[ $label =~ $FILTER ]] || return 0
  echo "chaos: $label ($DURATION)" >&2
  "$CHAOS" run --store "$url" --fault "$fault" --duration "$DURATION" --clients 16 \
    --locks "$locks" --ttl 2s --work 2s --interval 5s --register "$register" \
    --allow-violations --out "$OUT/$label" >"$OUT/$label.txt" 2>&1 ||
    echo "chaos: $label failed, see $OUT/$label.txt" >&2
}

# store_runs STORE URL REGISTER STORE-FAULTS...: the faults every store gets,
# then its own (node kills, restarts, clock jumps) over 100 locks.
store_runs() {
  local store=$1 url=$2 register=$3
  shift 3
  run "$store" "$url" kill 1 "$register"
  run "$store" "$url" pause 1 "$register"
  run "$store" "$url" pause 100 "$register"
  if [ "$register" != unfenced ]; then
    run "$store" "$url" pause 1 unfenced
  fi
  if [ "$store" != sqlite ]; then
    run "$store" "$url" partition 1 "$register"
  fi
  for fault in "$@"; do run "$store" "$url" "$fault" 100 "$register"; done
}

store_runs etcd "$OMNILOCK_TEST_ETCD_URL" fenced node &
store_runs sqlite "$OMNILOCK_TEST_SQLITE_URL" fenced &
wait
store_runs zk "$OMNILOCK_TEST_ZK_URL" fenced node &
store_runs postgres "$OMNILOCK_TEST_POSTGRES_URL" fenced &
wait
store_runs redis "$OMNILOCK_TEST_REDIS_URL" fenced restart node &
store_runs mysql "$OMNILOCK_TEST_MYSQL_URL" fenced node &
wait
# Redlock has no fencing tokens: its register is always unfenced.
store_runs redlock "$OMNILOCK_TEST_REDLOCK_URL" unfenced restart clock
"$CHAOS" table "$OUT" | tee "$OUT/table.md"
