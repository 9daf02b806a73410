#!/usr/bin/env bash
# The soak behind docs/reliability.md (Soak): one process, every main store
# of the test topology at once, a steady load of 64 clients per store (each
# with its own connection) over 1,000 names and every primitive, a store
# node paused or killed and restarted every minute, the process's memory,
# descriptors, sockets, connections per store and tokio tasks sampled every
# 10 s; fails when one of them keeps growing after the warm-up. Not part of
# the test command (a two-minute version is: crates/omnilock-chaos/tests/soak.rs).
#
#   scripts/soak.sh [DURATION]      default 1h; the stores must be up
#                                   (scripts/stores.sh up)
#   SOAK_CLIENTS=N                  clients per store (default 64)
#   SOAK_ARGS='...'                 more options of `omnilock-chaos soak`
#                                   (--names, --fault-every, --think, ...)
#
# The stores: etcd (3 members), the ZooKeeper ensemble, Redis one server,
# Redis Cluster, Sentinel, MySQL/MariaDB, PostgreSQL, SQLite and memory,
# from target/stores/env. Faults go to each store's nodes in turn (restart,
# then pause); PostgreSQL, which the script cannot restart, is paused only.
# Results in target/soak/: samples.csv (one line per sample), faults.csv,
# summary.json and summary.md (the verdict of every series, the stores'
# grants and errors by kind) and the curves: rss.svg, fds.svg, sockets.svg,
# tasks.svg, connections.svg, grants.svg. Exit status 1 when a series grew.
set -euo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
cd "$ROOT"
DURATION=${1:-1h}
OUT=target/soak
if [ ! -f target/stores/env ]; then
  echo "soak: target/stores/env is missing: start the stores with scripts/stores.sh up" >&2
  exit 2
fi
# shellcheck disable=SC1091
source target/stores/env

stores=()
for var in ETCD ZK REDIS REDIS_CLUSTER REDIS_SENTINEL MYSQL POSTGRES SQLITE; do
  name=OMNILOCK_TEST_${var}_URL
  if [ -z "${!name:-}" ]; then
    echo "soak: $name is not set in target/stores/env: is every store up?" >&2
    exit 2
  fi
  stores+=(--store "${!name}")
done
stores+=(--store mem://)

cargo build --release -q -p omnilock-chaos
rm -rf "$OUT"
mkdir -p "$OUT"
echo "soak: $DURATION over every store, results in $OUT" >&2
# shellcheck disable=SC2086
target/release/omnilock-chaos soak "${stores[@]}" --clients "${SOAK_CLIENTS:-64}" \
  --names 1000 --duration "$DURATION" --sample-every 10s --fault-every 60s \
  --out "$OUT" ${SOAK_ARGS:-} | tee "$OUT/verdict.txt"
