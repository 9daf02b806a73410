#!/usr/bin/env bash
# Starts (up) and stops (down) every store the tests need, on 127.0.0.1 with
# private ports and data directories under target/stores/.
#
#   scripts/stores.sh up     install what is missing, start, wait until ready,
#                            write target/stores/env (export OMNILOCK_TEST_<STORE>_URL=...)
#                            and target/stores/topology.json (below)
#   scripts/stores.sh down   stop exactly the processes `up` started
#   scripts/stores.sh env    print the env file
#   scripts/stores.sh plan   print the topology `up` would write (no process
#                            ids), without starting anything
#   scripts/stores.sh restart mariadb
#                            stop and start the test MariaDB on the same data
#   scripts/stores.sh restart etcd N | zookeeper N | redis N
#                            start a node the fault tests killed (Redis comes
#                            back empty: no persistence)
#   scripts/stores.sh restart redis-cluster N
#                            start Redis Cluster node N (0..5) again on its
#                            nodes.conf: it rejoins (empty), as a replica when
#                            its slots moved to another node meanwhile
#   scripts/stores.sh restart redis-sentinel N
#                            start the Sentinel deployment's data node N (0: the
#                            first master, 1: its replica) again, empty; the
#                            sentinels make it a replica of the current master
#   scripts/stores.sh deps   install what the build needs (nothing today:
#                            kept so older CI scripts still run)
#
# Run as root, it installs missing Debian packages with apt-get; run as
# another user, with `sudo apt-get` (which may ask for a password), and if
# there is no sudo it names the packages to install. The stores themselves
# run as whoever runs this script (PostgreSQL, which refuses root, as the
# postgres user when that is root).
#
# A second, independent set beside a running one (another worktree, say):
# its own OMNILOCK_STORES_DIR (the default is this checkout's target/stores)
# and OMNILOCK_STORES_PORT_OFFSET=N, which shifts every default port by N
# (500 is free of the default set's ports; every port must stay below 65536,
# and Redis's base is 63790). `up` remembers both in target/stores/settings,
# so `restart` and `down` need neither.
#
# This file is the driver: the arguments, the ports, which stores and
# packages, and the commands. The shared helpers are in scripts/stores/lib/
# (packages, waiting and the env file, throw-away TLS certificates, the
# process records, the topology). Each store lives in
# scripts/stores/<store>.sh and defines
#   plan_<store>     its deployments and nodes (see `deployment` and `node`)
#   start_<store>    start it, wait until ready, export its URLs
#   restart_<...>    start a killed node again (where the fault tests need it)
# and is listed in STORES; scripts/stores/facts.sh holds the default ports,
# versions and limits that docker/compose.yaml must agree with.
#
# A store's processes are recorded in target/stores/pids as "PID NAME SIGNAL
# NODE"; `down` checks /proc/PID/cmdline still names that program before
# signalling it, so it never stops anything it did not start.
#
# target/stores/topology.json is written by `up` and again after every
# `restart`; scripts/stores/lib/topology.sh describes its format.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SCRIPT=$ROOT/scripts/stores.sh
DIR=${OMNILOCK_STORES_DIR:-$ROOT/target/stores}
ENV_FILE=$DIR/env
PIDS=$DIR/pids
TOPOLOGY=$DIR/topology.json
SETTINGS=$DIR/settings

# shellcheck source=stores/facts.sh
source "$ROOT/scripts/stores/facts.sh"

# The ports, stores and offset of the set `up` started, for `restart` and
# `down` (whatever this shell's environment says).
if [ "${1:-}" != up ] && [ "${1:-}" != plan ] && [ -f "$SETTINGS" ]; then
  # shellcheck disable=SC1090
  source "$SETTINGS"
fi

OFFSET=${OMNILOCK_STORES_PORT_OFFSET:-0}
# Private ports (override one with OMNILOCK_<STORE>_PORT); each store's file
# says which ports it takes from its base.
MARIADB_PORT=${OMNILOCK_MARIADB_PORT:-$((MARIADB_PORT + OFFSET))}
POSTGRES_PORT=${OMNILOCK_POSTGRES_PORT:-$((POSTGRES_PORT + OFFSET))}
REDIS_PORT=${OMNILOCK_REDIS_PORT:-$((REDIS_PORT + OFFSET))}
REDIS_CLUSTER_PORT=${OMNILOCK_REDIS_CLUSTER_PORT:-$((REDIS_CLUSTER_PORT + OFFSET))}
REDIS_SENTINEL_PORT=${OMNILOCK_REDIS_SENTINEL_PORT:-$((REDIS_SENTINEL_PORT + OFFSET))}
ETCD_PORT=${OMNILOCK_ETCD_PORT:-$((ETCD_PORT + OFFSET))}
ZK_PORT=${OMNILOCK_ZK_PORT:-$((ZK_PORT + OFFSET))}

# The stores the test suite needs. A new backend appends its store here.
# OMNILOCK_STORES="etcd zookeeper" starts only those (with OMNILOCK_STORES_DIR,
# beside a full set).
# shellcheck disable=SC2206
STORES=(${OMNILOCK_STORES:-sqlite mariadb postgres redis redis_cluster redis_sentinel etcd zookeeper})

# Debian packages each store needs (installed with apt-get when run as root).
declare -A PACKAGES=(
  [sqlite]=""
  [mariadb]="mariadb-server mariadb-client"
  [postgres]="postgresql postgresql-client"
  [redis]="redis-server openssl"
  [redis_cluster]="redis-server"
  [redis_sentinel]="redis-server"
  [etcd]="etcd-server etcd-client openssl"
  # Curator and a JDK: the Curator interoperation test (tests/curator.rs).
  [zookeeper]="zookeeper netcat-openbsd default-jdk-headless libcurator-recipes-java libcurator-framework-java libcurator-client-java"
)

# Debian packages the build itself needs: none. etcd-client's protoc comes
# with cargo's download (scripts/protoc, .cargo/config.toml).
BUILD_PACKAGES=()

log() { printf 'stores: %s\n' "$*" >&2; }

for lib in packages waiting tls processes topology; do
  # shellcheck disable=SC1090
  source "$ROOT/scripts/stores/lib/$lib.sh"
done

# --- stores -----------------------------------------------------------------

for file in "$ROOT"/scripts/stores/*.sh; do
  [ "$(basename "$file")" = facts.sh ] && continue
  # shellcheck disable=SC1090
  source "$file"
done

for store in "${STORES[@]}"; do
  "plan_$store"
done

# --- commands ---------------------------------------------------------------

deps() {
  need_packages "${BUILD_PACKAGES[@]}"
}

# Private ports inside the kernel's range for outgoing connections
# (32768-60999 by default) can be taken by another process's outgoing
# connection just before a store binds them: "Address already in use" (a
# sentinel failed to start that way once). Where this script may (root,
# a writable /proc/sys), it reserves them, so that the kernel never picks
# them for an outgoing connection; elsewhere such a start fails with the
# server's message in its log, and `up` can be run again.
reserve_ports() {
  local file=/proc/sys/net/ipv4/ip_local_reserved_ports ranges=() base step
  [ -w "$file" ] || return 0
  for base in "$MARIADB_PORT" "$POSTGRES_PORT" "$REDIS_CLUSTER_PORT" "$REDIS_SENTINEL_PORT"; do
    # Each store's nodes, cluster buses (+1000) and TLS nodes' buses (+2000).
    for step in 0 1000 2000; do
      ranges+=("$((base + step))-$((base + step + 19))")
    done
  done
  local current joined
  current=$(cat "$file" 2>/dev/null || true)
  joined=$(
    IFS=,
    echo "${ranges[*]}"
  )
  echo "${current:+$current,}$joined" >"$file" 2>/dev/null || true
}

up() {
  mkdir -p "$DIR"
  if [ -s "$PIDS" ]; then
    log "stores already up (target/stores/pids exists); restarting"
    down
  fi
  reserve_ports
  : >"$PIDS"
  : >"$ENV_FILE"
  {
    echo "OMNILOCK_STORES='${STORES[*]}'"
    local var
    for var in MARIADB POSTGRES REDIS REDIS_CLUSTER REDIS_SENTINEL ETCD ZK; do
      echo "OMNILOCK_${var}_PORT=$(eval "echo \$${var}_PORT")"
    done
  } >"$SETTINGS"
  local store pkgs=()
  for store in "${STORES[@]}"; do
    # shellcheck disable=SC2206
    pkgs+=(${PACKAGES[$store]})
  done
  need_packages "${pkgs[@]}" "${BUILD_PACKAGES[@]}"
  for store in "${STORES[@]}"; do
    log "starting $store"
    "start_$store"
  done
  echo "export OMNILOCK_TEST_TOPOLOGY='$TOPOLOGY'" >>"$ENV_FILE"
  write_topology
  log "ready; environment in $ENV_FILE, topology in $TOPOLOGY"
}

down() {
  [ -f "$PIDS" ] || return 0
  local pid name signal node
  while read -r pid name signal node; do
    [ -n "$pid" ] || continue
    stop "$pid" "$name" "$signal"
  done <"$PIDS"
  rm -f "$PIDS" "$TOPOLOGY" "$PIDS.lock" "$TOPOLOGY.lock"
  log "stopped"
}

restart() {
  case "${1:-}" in
    mariadb) restart_mariadb ;;
    etcd) restart_etcd "${2:?member number 1..3}" ;;
    zookeeper) restart_zk "${2:?node number 1..3}" ;;
    redis) restart_redis "${2:?node number 0 (single) or 1..5 (Redlock)}" ;;
    redis-cluster) restart_redis_cluster "${2:?node number 0..5}" ;;
    redis-sentinel) restart_redis_sentinel "${2:?data node 0 (first master) or 1 (its replica)}" ;;
    *)
      echo "usage: $0 restart mariadb | restart etcd N | restart zookeeper N | restart redis N" \
        "| restart redis-cluster N | restart redis-sentinel N" >&2
      exit 64
      ;;
  esac
  write_topology
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) cat "$ENV_FILE" ;;
  plan) topology_json ;;
  deps)
    mkdir -p "$DIR"
    deps
    ;;
  restart)
    shift
    restart "$@"
    ;;
  *)
    echo "usage: $0 up|down|env|plan|deps|restart" >&2
    exit 64
    ;;
esac
