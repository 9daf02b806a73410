# shellcheck shell=bash
# Redis Sentinel: a master on REDIS_SENTINEL_PORT, its replica on +1, three
# sentinels on +2..4 watching the master as SENTINEL_MASTER, with a password
# of their own.

plan_redis_sentinel() {
  deployment redis_sentinel redis_sentinel "$REDIS_VERSION" master_name="$SENTINEL_MASTER" \
    down-after-milliseconds=1000 failover-timeout=5000
  node redis_sentinel 0 master "$REDIS_SENTINEL_PORT" data="$DIR/redis-sentinel/0" \
    restart=redis-sentinel,0
  node redis_sentinel 1 replica $((REDIS_SENTINEL_PORT + 1)) data="$DIR/redis-sentinel/1" \
    restart=redis-sentinel,1
  local i
  for i in 0 1 2; do
    node redis_sentinel "s$i" sentinel $((REDIS_SENTINEL_PORT + 2 + i)) \
      data="$DIR/redis-sentinel/s$i"
  done
}

# sentinel_cli PORT ARGS...: redis-cli against a sentinel, with its own password.
sentinel_cli() {
  local port=$1
  shift
  redis-cli -p "$port" -a "$SENTINEL_PASSWORD" --no-auth-warning "$@"
}

# launch_sentinel_node N: data node N of the Sentinel deployment: 0 starts as
# the master, 1 as its replica. Both have masterauth: after a failover the
# first master is a replica too. Full syncs start at once (see
# launch_redis_cluster).
launch_sentinel_node() {
  local dir=$DIR/redis-sentinel/$1 port=$((REDIS_SENTINEL_PORT + $1)) replicaof=()
  mkdir -p "$dir"
  [ "$1" = 1 ] && replicaof=(--replicaof 127.0.0.1 "$REDIS_SENTINEL_PORT")
  redis-server --bind 127.0.0.1 --port "$port" --save "" --appendonly no \
    --repl-diskless-sync-delay 0 --requirepass "$TEST_PASSWORD" \
    --masterauth "$TEST_PASSWORD" "${replicaof[@]}" \
    --dir "$dir" --logfile "$dir/redis.log" >"$dir/stdout.log" 2>&1 </dev/null &
  record $! redis-server TERM "redis_sentinel/$1"
}

# launch_sentinel N: sentinel N (0..2) on REDIS_SENTINEL_PORT+2+N, with its own
# config file (a sentinel rewrites it). The sentinels require their own
# password and give it to each other (sentinel-pass).
launch_sentinel() {
  local dir=$DIR/redis-sentinel/s$1 port=$((REDIS_SENTINEL_PORT + 2 + $1))
  mkdir -p "$dir"
  cat >"$dir/sentinel.conf" <<CONF
port $port
bind 127.0.0.1
dir $dir
logfile $dir/sentinel.log
requirepass $SENTINEL_PASSWORD
sentinel sentinel-pass $SENTINEL_PASSWORD
sentinel monitor $SENTINEL_MASTER 127.0.0.1 $REDIS_SENTINEL_PORT 2
sentinel auth-pass $SENTINEL_MASTER $TEST_PASSWORD
sentinel down-after-milliseconds $SENTINEL_MASTER 1000
sentinel failover-timeout $SENTINEL_MASTER 5000
sentinel parallel-syncs $SENTINEL_MASTER 1
CONF
  redis-server "$dir/sentinel.conf" --sentinel >"$dir/stdout.log" 2>&1 </dev/null &
  record $! redis-server TERM "redis_sentinel/s$1"
}

# redis_sentinel_settled: every sentinel names the same master, sees it up,
# knows one replica and the two other sentinels (SENTINEL FAILOVER needs
# them); every data node that answers is that master, or its replica with the
# link up.
redis_sentinel_settled() {
  local i port state addr master=""
  for i in 0 1 2; do
    port=$((REDIS_SENTINEL_PORT + 2 + i))
    state=$(sentinel_cli "$port" sentinel master "$SENTINEL_MASTER" |
      awk 'NR % 2 { key = $0; next } { print key "=" $0 }')
    grep -qx 'flags=master' <<<"$state" || return 1
    grep -qx 'num-slaves=1' <<<"$state" || return 1
    grep -qx 'num-other-sentinels=2' <<<"$state" || return 1
    addr=$(sentinel_cli "$port" sentinel get-master-addr-by-name "$SENTINEL_MASTER" | paste -sd:)
    [ -n "$master" ] || master=$addr
    [ "$addr" = "$master" ] || return 1
  done
  local info
  for i in 0 1; do
    port=$((REDIS_SENTINEL_PORT + i))
    if [ "127.0.0.1:$port" = "$master" ]; then
      redis_cli "$port" info replication | grep -q '^role:master' || return 1
    elif redis_ready "$port"; then
      info=$(redis_cli "$port" info replication | tr -d '\r')
      grep -qx 'role:slave' <<<"$info" || return 1
      grep -qx "master_port:${master##*:}" <<<"$info" || return 1
      grep -qx 'master_link_status:up' <<<"$info" || return 1
    fi
  done
}

# restart_redis_sentinel N: start data node N (0: the first master, 1: its
# replica) again after a test killed it, empty, as it was first started: 0 as
# a master (the sentinels turn it into a replica of the current master, after
# about 8 s), 1 as a replica of node 0. Waits until the sentinels and the data
# nodes agree again (see redis_sentinel_settled).
restart_redis_sentinel() {
  case $1 in
    0 | 1) ;;
    *) log "redis-sentinel: data node 0 or 1, not $1"; return 64 ;;
  esac
  launch_sentinel_node "$1"
  wait_for 30 "redis sentinel data node $1" redis_ready $((REDIS_SENTINEL_PORT + $1))
  wait_for 60 "redis sentinel after restarting node $1" redis_sentinel_settled
}

start_redis_sentinel() {
  rm -rf "$DIR/redis-sentinel"
  local i sentinels=()
  for i in 0 1; do
    launch_sentinel_node "$i"
  done
  for i in 0 1; do
    wait_for 30 "redis sentinel data node $i" redis_ready $((REDIS_SENTINEL_PORT + i))
  done
  for i in 0 1 2; do
    launch_sentinel "$i"
    sentinels+=("127.0.0.1:$((REDIS_SENTINEL_PORT + 2 + i))")
  done
  wait_for 60 "redis sentinel" redis_sentinel_settled
  export_url REDIS_SENTINEL "redis+sentinel://:$TEST_PASSWORD@$(IFS=,; echo "${sentinels[*]}")/$SENTINEL_MASTER?sentinel_password=$SENTINEL_PASSWORD"
}
