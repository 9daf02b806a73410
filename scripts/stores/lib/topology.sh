# shellcheck shell=bash
# The test topology: each store's plan_<store> declares its deployments and
# nodes with `deployment` and `node`; `write_topology` writes them, with the
# live process ids, as target/stores/topology.json. Sourced by
# scripts/stores.sh (which sets DIR, SCRIPT, PIDS and TOPOLOGY).
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
  (
    # Restarts of two deployments at once: one rewrite at a time.
    flock 9
    topology_json >"$TOPOLOGY.new"
    mv "$TOPOLOGY.new" "$TOPOLOGY"
  ) 9>>"$TOPOLOGY.lock"
}
