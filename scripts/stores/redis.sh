# shellcheck shell=bash
# Redis: one instance on REDIS_PORT (with an ACL user), five independent
# Redlock nodes on REDIS_PORT+1..5, and one instance that speaks only TLS on
# REDIS_PORT+6. No persistence: a restarted node comes back empty.

plan_redis() {
  deployment redis redis "$REDIS_VERSION"
  node redis 0 single "$REDIS_PORT" data="$DIR/redis/0" restart=redis,0
  deployment redlock redis "$REDIS_VERSION"
  local i
  for i in 1 2 3 4 5; do
    node redlock "$i" node $((REDIS_PORT + i)) data="$DIR/redis/$i" restart=redis,$i
  done
  deployment redis_tls redis "$REDIS_VERSION"
  node redis_tls 0 tls $((REDIS_PORT + 6)) data="$DIR/redis/tls"
}

# redis_node_key N: the topology node of instance N (0 single, 1..5 Redlock).
redis_node_key() { if [ "$1" = 0 ]; then echo redis/0; else echo "redlock/$1"; fi; }

# launch_redis N PORT: one redis-server, no persistence (a restart loses every
# key, which the chaos harness's restart fault relies on).
launch_redis() {
  local dir=$DIR/redis/$1
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$2" --save "" --appendonly no --daemonize no \
    --requirepass "$TEST_PASSWORD" --dir "$dir" --logfile "$dir/redis.log" \
    >"$dir/stdout.log" 2>&1 </dev/null &
  record $! redis-server TERM "$(redis_node_key "$1")"
}

# restart_redis N: start node N again after the chaos harness killed it (empty:
# no persistence), with node 0's ACL user.
restart_redis() {
  local port=$((REDIS_PORT + $1))
  launch_redis "$1" "$port"
  wait_for 30 "redis on $port" redis_ready "$port"
  [ "$1" = 0 ] && redis_acl_user
  return 0
}

# redis_acl_user: an ACL user on node 0 with just the rights the lock protocol needs.
redis_acl_user() {
  redis-cli -p "$REDIS_PORT" -a "$TEST_PASSWORD" --no-auth-warning ACL SETUSER locker on \
    ">$TEST_PASSWORD" "~omnilock*" "~{omnilock*" "&omnilock*" +@read +@write +@scripting \
    +@pubsub +ping +time >/dev/null
}

redis_ready() { redis-cli -p "$1" -a "$TEST_PASSWORD" --no-auth-warning ping | grep -q PONG; }

# redis_cli PORT ARGS...: redis-cli against a data node with the test password.
redis_cli() {
  local port=$1
  shift
  redis-cli -p "$port" -a "$TEST_PASSWORD" --no-auth-warning "$@"
}

# start_redis_tls: one more instance that speaks only TLS, with a private CA.
start_redis_tls() {
  local tls=$DIR/redis/tls port=$((REDIS_PORT + 6))
  tls_ca "$tls" omnilock-test-ca
  tls_cert "$tls" server 127.0.0.1 IP:127.0.0.1,DNS:localhost
  redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" --tls-cert-file "$tls/server.crt" \
    --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients no \
    --save "" --appendonly no --requirepass "$TEST_PASSWORD" --dir "$tls" \
    --logfile "$tls/redis.log" >"$tls/stdout.log" 2>&1 </dev/null &
  record $! redis-server TERM redis_tls/0
  wait_for 30 "redis TLS on $port" sh -c \
    "redis-cli --tls --cacert '$tls/ca.crt' -p $port -a '$TEST_PASSWORD' --no-auth-warning ping | grep -q PONG"
  export_url REDIS_TLS "rediss://:$TEST_PASSWORD@127.0.0.1:$port?tls_ca=$tls/ca.crt"
}

start_redis() {
  rm -rf "$DIR/redis"
  local i port nodes=()
  for i in 0 1 2 3 4 5; do
    port=$((REDIS_PORT + i))
    launch_redis "$i" "$port"
    if [ "$i" -gt 0 ]; then nodes+=("127.0.0.1:$port"); fi
  done
  for i in 0 1 2 3 4 5; do
    wait_for 30 "redis on $((REDIS_PORT + i))" redis_ready $((REDIS_PORT + i))
  done
  redis_acl_user
  start_redis_tls
  export_url REDIS "redis://:$TEST_PASSWORD@127.0.0.1:$REDIS_PORT"
  export_url REDIS_ACL "redis://locker:$TEST_PASSWORD@127.0.0.1:$REDIS_PORT"
  export_url REDLOCK "redlock://:$TEST_PASSWORD@$(IFS=,; echo "${nodes[*]}")/"
  echo "export OMNILOCK_TEST_REDLOCK_FIRST_PORT=$((REDIS_PORT + 1))" >>"$ENV_FILE"
  echo "export OMNILOCK_TEST_REDIS_PORT=$REDIS_PORT" >>"$ENV_FILE"
}
