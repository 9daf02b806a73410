# shellcheck shell=bash
# ZooKeeper: a 3-node ensemble on ZK_PORT+1..3 (quorum ports +1001..3,
# election +2001..3) and a standalone node on ZK_PORT+4, which also serves
# TLS on ZK_PORT+5 (client certificates required).

plan_zookeeper() {
  local i settings=(tickTime="$ZK_TICK_TIME" maxClientCnxns="$ZK_MAX_CLIENT_CNXNS"
    maxSessionTimeout="$ZK_MAX_SESSION_TIMEOUT")
  deployment zookeeper zookeeper "$ZOOKEEPER_VERSION" "${settings[@]}"
  for i in 1 2 3; do
    node zookeeper "$i" participant $((ZK_PORT + i)) quorum=$((ZK_PORT + 1000 + i)) \
      election=$((ZK_PORT + 2000 + i)) data="$DIR/zk/$i" restart=zookeeper,$i
  done
  deployment zookeeper_standalone zookeeper "$ZOOKEEPER_VERSION" "${settings[@]}"
  node zookeeper_standalone 4 standalone $((ZK_PORT + 4)) data="$DIR/zk/4"
}

# The server, its log binding, and what its Netty connections need beyond
# the jars zookeeper.jar's manifest names (TLS runs on Netty).
ZK_CLASSPATH=/usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar:/usr/share/java/netty-codec.jar:/usr/share/java/netty-resolver.jar

# launch_zk N: start ZooKeeper node N (its zoo.cfg is already written).
launch_zk() {
  local dir=$DIR/zk/$1 key=zookeeper/$1
  [ "$1" != 4 ] || key=zookeeper_standalone/4
  # Empty lock containers are removed after 1 s instead of 60 s (tests check it).
  java -Xmx256m -XX:+UseSerialGC -Dznode.container.checkIntervalMs=1000 \
    -Dzookeeper.log.dir="$dir" \
    -cp "$ZK_CLASSPATH" \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >"$dir/server.log" 2>&1 </dev/null &
  record $! "zk/$1/zoo.cfg" TERM "$key"
}

zk_ready() { echo srvr | nc -w 2 127.0.0.1 "$1" 2>/dev/null | grep -q '^Mode: '; }

# write_zk_config N PORT [SERVERS...]: a node's zoo.cfg and data dir.
write_zk_config() {
  local n=$1 port=$2 dir=$DIR/zk/$1
  shift 2
  mkdir -p "$dir/data"
  echo "$n" >"$dir/data/myid"
  {
    echo "tickTime=$ZK_TICK_TIME"
    echo "initLimit=20"
    echo "syncLimit=10"
    echo "dataDir=$dir/data"
    echo "clientPort=$port"
    echo "clientPortAddress=127.0.0.1"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=*"
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=$ZK_MAX_SESSION_TIMEOUT"
    echo "forceSync=no"
    # Every client here comes from 127.0.0.1, and ZooKeeper refuses more
    # than 60 connections per address by default: 64 bench clients, or the
    # suites running side by side, would be turned away.
    echo "maxClientCnxns=$ZK_MAX_CLIENT_CNXNS"
    printf '%s\n' "$@"
  } >"$dir/zoo.cfg"
}

# restart_zk N: start node N (1..3) of the ensemble again, after a test killed it.
restart_zk() {
  launch_zk "$1"
  wait_for 60 "zookeeper node $1" zk_ready $((ZK_PORT + $1))
}

start_zookeeper() {
  rm -rf "$DIR/zk"
  local i servers=() hosts=()
  for i in 1 2 3; do
    servers+=("server.$i=127.0.0.1:$((ZK_PORT + 1000 + i)):$((ZK_PORT + 2000 + i))")
    hosts+=("127.0.0.1:$((ZK_PORT + i))")
  done
  for i in 1 2 3; do
    write_zk_config "$i" $((ZK_PORT + i)) "${servers[@]}"
    launch_zk "$i"
  done
  # TLS on the standalone node: ZooKeeper's secureClientPort, on Netty,
  # with PEM files and client certificates required.
  local tls=$DIR/zk/tls
  tls_ca "$tls" omnilock-zk-test-ca
  tls_cert "$tls" server 127.0.0.1 IP:127.0.0.1
  tls_cert "$tls" client omnilock email:omnilock@example.invalid
  cat "$tls/server.key" "$tls/server.crt" >"$tls/server.pem"
  write_zk_config 4 $((ZK_PORT + 4)) \
    "secureClientPort=$((ZK_PORT + 5))" "secureClientPortAddress=127.0.0.1" \
    serverCnxnFactory=org.apache.zookeeper.server.NettyServerCnxnFactory \
    "ssl.keyStore.location=$tls/server.pem" ssl.keyStore.type=PEM \
    "ssl.trustStore.location=$tls/ca.crt" ssl.trustStore.type=PEM ssl.clientAuth=need
  launch_zk 4
  for i in 1 2 3 4; do
    wait_for 90 "zookeeper node $i" zk_ready $((ZK_PORT + i))
  done
  export_url ZK "zk://$(IFS=,; echo "${hosts[*]}")/omnilock"
  export_url ZK_STANDALONE "zk://127.0.0.1:$((ZK_PORT + 4))/omnilock"
  export_url ZK_TLS "zks://127.0.0.1:$((ZK_PORT + 5))/omnilock?tls_ca=$tls/ca.crt&tls_cert=$tls/client.crt&tls_key=$tls/client.key"
  export_url ZK_DIGEST "zk://$TEST_USER:$TEST_PASSWORD@$(IFS=,; echo "${hosts[*]}")/omnilock-acl"
  echo "export OMNILOCK_TEST_ZK_FIRST_PORT=$((ZK_PORT + 1))" >>"$ENV_FILE"
}
