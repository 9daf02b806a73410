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
# This file is the driver: arguments, the shared helpers (packages, waiting,
# the env file, throw-away TLS certificates, the process records) and the
# topology. Each store lives in scripts/stores/<store>.sh and defines
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
# target/stores/topology.json, written by `up` and again after every
# `restart` (the restarted node's process id changes), is one JSON document
# (read in Rust by omnilock_harness::topology::Topology::load):
#   {
#     "format": 1,
#     "dir": "/…/target/stores",            the stores' directory
#     "script": "/…/scripts/stores.sh",     this script
#     "env": { "OMNILOCK_STORES_DIR": … },  the environment to run it with
#     "deployments": [
#       { "name": "redis_cluster",          one set of nodes a URL can name
#         "store": "redis_cluster",         the STORES entry that starts it
#         "version": "7.0",                 the version the script expects
#         "settings": { "cluster-node-timeout": "1000" },   facts tests need
#         "nodes": [
#           { "name": "0",                  unique in the deployment
#             "role": "master",             the role it starts in (failovers
#                                           move masters: ask the store)
#             "host": "127.0.0.1", "port": 46380,
#             "ports": { "bus": 47380 },    its other ports
#             "data_dir": "/…/redis-cluster/0", "pid_file": null,
#             "pid": 1234,                  null when not running
#             "started": 5678,              the process's start time (clock
#                                           ticks after boot, /proc/PID/stat
#                                           field 22): a recycled PID shows
#                                           another
#             "restart": ["redis-cluster", "0"] }   `stores.sh restart` args,
#         ] } ] }                           or null: not restartable
# The env file exports OMNILOCK_TEST_TOPOLOGY, the file's path.
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

need_packages() {
  local missing=() pkg
  for pkg in "$@"; do
    dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  local as_root=()
  if [ "$(id -u)" -ne 0 ]; then
    if ! command -v sudo >/dev/null; then
      log "missing packages: ${missing[*]}; as root run: apt-get install ${missing[*]}"
      return 1
    fi
    as_root=(sudo --preserve-env=DEBIAN_FRONTEND)
  fi
  log "installing ${missing[*]}${as_root:+ (with sudo)}"
  if [ ! -f "$DIR/.apt-updated" ]; then
    DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get update -qq
    touch "$DIR/.apt-updated"
  fi
  DEBIAN_FRONTEND=noninteractive "${as_root[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
}

# wait_for SECONDS DESCRIPTION COMMAND...: poll COMMAND until it succeeds.
wait_for() {
  local seconds=$1 what=$2
  shift 2
  local deadline=$((SECONDS + seconds))
  until "$@" >/dev/null 2>&1; do
    if [ $SECONDS -ge $deadline ]; then
      log "$what did not become ready within ${seconds}s"
      return 1
    fi
    sleep 0.1
  done
}

export_url() { echo "export OMNILOCK_TEST_$1_URL='$2'" >>"$ENV_FILE"; }

# tls_ca DIR CN: a throw-away certificate authority, DIR/ca.crt and DIR/ca.key.
tls_ca() {
  mkdir -p "$1"
  openssl req -x509 -newkey rsa:2048 -nodes -keyout "$1/ca.key" -out "$1/ca.crt" \
    -days 30 -subj "/CN=$2" >/dev/null 2>&1
}

# tls_cert DIR NAME CN SAN: DIR/NAME.crt and DIR/NAME.key, signed by DIR's CA,
# for the subject CN and the subjectAltName SAN (rustls checks only the SAN).
tls_cert() {
  local dir=$1 name=$2
  openssl req -newkey rsa:2048 -nodes -keyout "$dir/$name.key" -out "$dir/$name.csr" \
    -subj "/CN=$3" >/dev/null 2>&1
  printf 'subjectAltName=%s\n' "$4" >"$dir/$name.ext"
  openssl x509 -req -in "$dir/$name.csr" -CA "$dir/ca.crt" -CAkey "$dir/ca.key" \
    -CAcreateserial -out "$dir/$name.crt" -days 30 -extfile "$dir/$name.ext" >/dev/null 2>&1
}

# --- processes --------------------------------------------------------------

# alive PID: the process exists and has not exited. An exited process the
# shell left behind stays a zombie until init reaps it, which on these
# machines takes a second or two.
alive() {
  [ -d "/proc/$1" ] && [ "$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)" != Z ]
}

# record PID NAME [SIGNAL [NODE]]: remember a process we started, the program
# name its command line must still show, the signal that stops it cleanly,
# and the topology node it runs (DEPLOYMENT/NAME). A node's earlier records
# whose process is gone are dropped.
record() {
  local key=${4:--}
  if [ "$key" != - ] && [ -s "$PIDS" ]; then
    local pid name signal node
    while read -r pid name signal node; do
      [ "${node:--}" = "$key" ] && ! alive "$pid" && continue
      echo "$pid $name $signal ${node:--}"
    done <"$PIDS" >"$PIDS.new"
    mv "$PIDS.new" "$PIDS"
  fi
  echo "$1 $2 ${3:-TERM} $key" >>"$PIDS"
}

# stop PID NAME SIGNAL: stop one recorded process, if it is still ours.
stop() {
  local pid=$1 name=$2 signal=${3:-TERM}
  if [ -r "/proc/$pid/cmdline" ] && tr '\0' ' ' <"/proc/$pid/cmdline" | grep -q -- "$name"; then
    kill "-$signal" "$pid" 2>/dev/null || true
    for _ in $(seq 100); do
      alive "$pid" || break
      sleep 0.1
    done
    alive "$pid" && kill -9 "$pid" 2>/dev/null || true
  fi
}

# stop_recorded NAME: stop the recorded processes called NAME and forget them.
stop_recorded() {
  local pid name signal node
  while read -r pid name signal node; do
    [ "$name" = "$1" ] && stop "$pid" "$name" "$signal"
  done <"$PIDS"
  grep -v " $1 " "$PIDS" >"$PIDS.new" || true
  mv "$PIDS.new" "$PIDS"
}

# --- topology ---------------------------------------------------------------

DEPLOYMENTS=()
declare -A DEPLOYMENT=() NODE=()

# deployment NAME STORE VERSION [KEY=VALUE...]: a set of nodes one URL names,
# started by STORE, with the settings tests may need to know.
deployment() {
  local name=$1
  DEPLOYMENTS+=("$name")
  DEPLOYMENT[$name.store]=$2
  DEPLOYMENT[$name.version]=$3
  shift 3
  DEPLOYMENT[$name.settings]="$*"
  DEPLOYMENT[$name.nodes]=""
}

# node DEPLOYMENT NAME ROLE PORT [FIELD=VALUE...]: one node of a deployment
# (PORT "-" for none). FIELD is data (its directory), pid_file, restart (the
# arguments of `stores.sh restart`, comma-separated), or the name of another
# port it listens on (bus=47380).
node() {
  local key=$1/$2 field
  DEPLOYMENT[$1.nodes]+=" $2"
  NODE[$key.role]=$3
  NODE[$key.port]=$4
  NODE[$key.ports]=""
  shift 4
  for field in "$@"; do
    case ${field%%=*} in
      data | pid_file | restart) NODE[$key.${field%%=*}]=${field#*=} ;;
      *) NODE[$key.ports]+=" $field" ;;
    esac
  done
}

json_str() {
  local s=${1//\\/\\\\}
  printf '"%s"' "${s//\"/\\\"}"
}

# json_or_null VALUE: VALUE as a JSON string, or null when empty.
json_or_null() { if [ -n "$1" ]; then json_str "$1"; else printf null; fi; }

# node_pid DEPLOYMENT/NAME: the live process recorded for the node, if any.
node_pid() {
  [ -f "$PIDS" ] || return 0
  local pid name signal node found=""
  while read -r pid name signal node; do
    [ "$node" = "$1" ] && alive "$pid" && found=$pid
  done <"$PIDS"
  echo "$found"
}

# topology_json: the document described at the top of this file.
topology_json() {
  local dep name key first_dep=1 first_node first kv pid started list
  printf '{\n  "format": 1,\n  "dir": %s,\n  "script": %s,\n' "$(json_str "$DIR")" "$(json_str "$SCRIPT")"
  printf '  "env": { "OMNILOCK_STORES_DIR": %s },\n  "deployments": [' "$(json_str "$DIR")"
  for dep in "${DEPLOYMENTS[@]}"; do
    [ $first_dep = 1 ] || printf ','
    first_dep=0
    printf '\n    {\n      "name": %s,\n      "store": %s,\n      "version": %s,\n      "settings": {' \
      "$(json_str "$dep")" "$(json_str "${DEPLOYMENT[$dep.store]}")" "$(json_or_null "${DEPLOYMENT[$dep.version]}")"
    first=1
    for kv in ${DEPLOYMENT[$dep.settings]}; do
      [ $first = 1 ] || printf ','
      first=0
      printf ' %s: %s' "$(json_str "${kv%%=*}")" "$(json_str "${kv#*=}")"
    done
    printf ' },\n      "nodes": ['
    first_node=1
    for name in ${DEPLOYMENT[$dep.nodes]}; do
      key=$dep/$name
      [ $first_node = 1 ] || printf ','
      first_node=0
      printf '\n        { "name": %s, "role": %s, "host": "127.0.0.1", "port": %s, "ports": {' \
        "$(json_str "$name")" "$(json_str "${NODE[$key.role]}")" \
        "$([ "${NODE[$key.port]}" = - ] && echo null || echo "${NODE[$key.port]}")"
      first=1
      for kv in ${NODE[$key.ports]}; do
        [ $first = 1 ] || printf ','
        first=0
        printf ' %s: %s' "$(json_str "${kv%%=*}")" "${kv#*=}"
      done
      pid=$(node_pid "$key")
      started=""
      [ -z "$pid" ] || started=$(sed 's/.*) //' "/proc/$pid/stat" 2>/dev/null | awk '{ print $20 }')
      list=null
      if [ -n "${NODE[$key.restart]:-}" ]; then
        list=$(IFS=,; for kv in ${NODE[$key.restart]}; do printf '%s\n' "$(json_str "$kv")"; done | paste -sd,)
        list="[$list]"
      fi
      printf ' },\n          "data_dir": %s, "pid_file": %s,\n          "pid": %s, "started": %s, "restart": %s }' \
        "$(json_or_null "${NODE[$key.data]:-}")" "$(json_or_null "${NODE[$key.pid_file]:-}")" \
        "${pid:-null}" "${started:-null}" "$list"
    done
    printf '\n      ]\n    }'
  done
  printf '\n  ]\n}\n'
}

# write_topology: target/stores/topology.json, replaced in one step (tests
# may be reading it).
write_topology() {
  topology_json >"$TOPOLOGY.new"
  mv "$TOPOLOGY.new" "$TOPOLOGY"
}

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

up() {
  mkdir -p "$DIR"
  if [ -s "$PIDS" ]; then
    log "stores already up (target/stores/pids exists); restarting"
    down
  fi
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
  rm -f "$PIDS" "$TOPOLOGY"
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
