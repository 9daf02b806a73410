# shellcheck shell=bash
# Redis Cluster: 6 nodes (3 masters, 3 replicas) on REDIS_CLUSTER_PORT+0..5,
# their cluster bus on +1000..1005 (not Redis's +10000, which would pass
# 65535 for some bases); a TLS-only cluster of 3 masters on +16..18 (bus
# +1016..1018).

plan_redis_cluster() {
  local settings=(cluster-node-timeout=1000 cluster-replica-validity-factor=0)
  deployment redis_cluster redis_cluster "$REDIS_VERSION" "${settings[@]}"
  local i port role
  for i in 0 1 2 3 4 5; do
    port=$((REDIS_CLUSTER_PORT + i))
    role=master
    [ "$i" -lt 3 ] || role=replica
    node redis_cluster "$i" "$role" "$port" bus=$((port + 1000)) \
      data="$DIR/redis-cluster/$i" restart=redis-cluster,$i
  done
  deployment redis_cluster_tls redis_cluster "$REDIS_VERSION" "${settings[0]}"
  for i in 0 1 2; do
    port=$((REDIS_CLUSTER_PORT + 16 + i))
    node redis_cluster_tls "$i" master "$port" bus=$((port + 1000)) \
      data="$DIR/redis-cluster/tls/$i"
  done
}

# launch_redis_cluster N: Redis Cluster node N (0..5) on REDIS_CLUSTER_PORT+N,
# its bus on +1000+N, its nodes.conf in its own dir (a restart keeps it, so
# the node rejoins as itself). A short node timeout makes failover quick; a
# replica validity factor of 0 lets any replica be promoted; replicas log in
# to their master with the same password. A master sends a replica its full
# copy at once, not after Redis's default 5 s wait for more replicas.
launch_redis_cluster() {
  local dir=$DIR/redis-cluster/$1 port=$((REDIS_CLUSTER_PORT + $1))
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$port" --cluster-enabled yes \
    --cluster-port $((port + 1000)) --cluster-config-file "$dir/nodes.conf" \
    --cluster-node-timeout 1000 --cluster-replica-validity-factor 0 \
    --save "" --appendonly no --repl-diskless-sync-delay 0 \
    --requirepass "$TEST_PASSWORD" --masterauth "$TEST_PASSWORD" \
    --dir "$dir" --logfile "$dir/redis.log" >"$dir/stdout.log" 2>&1 </dev/null &
  record $! redis-server TERM "redis_cluster/$1"
}

# redis_cluster_view PORT: what node PORT believes: how many nodes it knows,
# and every master not marked failing that serves slots, with its slots.
redis_cluster_view() {
  redis_cli "$1" cluster nodes | tr -d '\r' | awk '
    { n++ }
    $3 ~ /master/ && $3 !~ /fail/ && NF >= 9 {
      m = $1; for (i = 9; i <= NF; i++) m = m " " $i; print m
    }
    END { print "nodes " n }' | sort
}

# redis_cluster_settled [MIN]: at least MIN nodes (default 1) answer; every
# node that answers says cluster_state:ok, has its replication link up when it
# is a replica, and they all agree on the three masters and their slots.
redis_cluster_settled() {
  local i port view first="" live=0
  for i in 0 1 2 3 4 5; do
    port=$((REDIS_CLUSTER_PORT + i))
    redis_ready "$port" || continue
    live=$((live + 1))
    redis_cli "$port" cluster info | grep -q '^cluster_state:ok' || return 1
    if redis_cli "$port" info replication | grep -q '^role:slave'; then
      redis_cli "$port" info replication | grep -q '^master_link_status:up' || return 1
    fi
    view=$(redis_cluster_view "$port")
    [ "$(grep -c -v '^nodes ' <<<"$view")" -eq 3 ] || return 1
    [ -n "$first" ] || first=$view
    [ "$view" = "$first" ] || return 1
  done
  [ "$live" -ge "${1:-1}" ]
}

# restart_redis_cluster N: start node N (0..5) again after a test killed it.
# It comes back empty (no persistence) with its nodes.conf, so it rejoins as
# itself: a replica when its replica was promoted meanwhile. Waits until every
# live node agrees again (see redis_cluster_settled). Restarting a master
# before its replica took over brings it back as an empty master.
restart_redis_cluster() {
  case $1 in
    [0-5]) ;;
    *) log "redis-cluster: node number 0..5, not $1"; return 64 ;;
  esac
  local port=$((REDIS_CLUSTER_PORT + $1))
  if [ ! -s "$DIR/redis-cluster/$1/nodes.conf" ]; then
    log "redis-cluster node $1 has no nodes.conf: run up first"
    return 1
  fi
  launch_redis_cluster "$1"
  wait_for 30 "redis cluster node $1" redis_ready "$port"
  wait_for 60 "redis cluster after restarting node $1" redis_cluster_settled
}

start_redis_cluster() {
  rm -rf "$DIR/redis-cluster"
  local i nodes=()
  for i in 0 1 2 3 4 5; do
    launch_redis_cluster "$i"
    nodes+=("127.0.0.1:$((REDIS_CLUSTER_PORT + i))")
  done
  for i in 0 1 2 3 4 5; do
    wait_for 30 "redis cluster node $i" redis_ready $((REDIS_CLUSTER_PORT + i))
  done
  # 3 masters (slots 0-5460, 5461-10922, 10923-16383), one replica each.
  if ! redis-cli -a "$TEST_PASSWORD" --no-auth-warning --cluster create "${nodes[@]}" \
    --cluster-replicas 1 --cluster-yes >"$DIR/redis-cluster/create.log" 2>&1; then
    cat "$DIR/redis-cluster/create.log" >&2
    return 1
  fi
  wait_for 60 "redis cluster" redis_cluster_settled 6
  export_url REDIS_CLUSTER "redis+cluster://:$TEST_PASSWORD@$(IFS=,; echo "${nodes[*]:0:3}")"
  start_redis_cluster_tls
}

# start_redis_cluster_tls: a second cluster that speaks only TLS, clients and
# cluster bus alike (3 masters, no replicas, REDIS_CLUSTER_PORT+16..18), with
# a private CA: for rediss+cluster://.
start_redis_cluster_tls() {
  local tls=$DIR/redis-cluster/tls i port nodes=()
  tls_ca "$tls" omnilock-test-ca
  tls_cert "$tls" server 127.0.0.1 IP:127.0.0.1,DNS:localhost
  for i in 0 1 2; do
    port=$((REDIS_CLUSTER_PORT + 16 + i))
    mkdir -p "$tls/$i"
    redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" --tls-cluster yes \
      --tls-cert-file "$tls/server.crt" --tls-key-file "$tls/server.key" \
      --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients no \
      --cluster-enabled yes --cluster-port $((port + 1000)) \
      --cluster-config-file "$tls/$i/nodes.conf" --cluster-node-timeout 1000 \
      --save "" --appendonly no --requirepass "$TEST_PASSWORD" \
      --dir "$tls/$i" --logfile "$tls/$i/redis.log" >"$tls/$i/stdout.log" 2>&1 </dev/null &
    record $! redis-server TERM "redis_cluster_tls/$i"
    nodes+=("127.0.0.1:$port")
  done
  local cli=(redis-cli --tls --cacert "$tls/ca.crt" -a "$TEST_PASSWORD" --no-auth-warning)
  for i in 0 1 2; do
    port=$((REDIS_CLUSTER_PORT + 16 + i))
    wait_for 30 "redis TLS cluster node $i" sh -c \
      "$(printf '%q ' "${cli[@]}") -p $port ping | grep -q PONG"
  done
  if ! "${cli[@]}" --cluster create "${nodes[@]}" --cluster-replicas 0 --cluster-yes \
    >"$tls/create.log" 2>&1; then
    cat "$tls/create.log" >&2
    return 1
  fi
  wait_for 60 "redis TLS cluster" sh -c \
    "for p in ${nodes[*]##*:}; do $(printf '%q ' "${cli[@]}") -p \$p cluster info | grep -q '^cluster_state:ok' || exit 1; done"
  export_url REDIS_CLUSTER_TLS \
    "rediss+cluster://:$TEST_PASSWORD@$(IFS=,; echo "${nodes[*]}")?tls_ca=$tls/ca.crt"
}
