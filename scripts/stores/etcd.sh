# shellcheck shell=bash
# etcd: a 3-member cluster, client ports ETCD_PORT+1..3, peer ports +11..13;
# one more member with authentication enabled on ETCD_PORT+4 (peer +14); one
# that speaks TLS and wants a client certificate on +5 (peer +15).

plan_etcd() {
  local i
  deployment etcd etcd "$ETCD_VERSION" heartbeat-interval=100 election-timeout=1000
  for i in 1 2 3; do
    node etcd "e$i" member $((ETCD_PORT + i)) peer=$((ETCD_PORT + 10 + i)) \
      data="$DIR/etcd/e$i/data" restart=etcd,$i
  done
  deployment etcd_auth etcd "$ETCD_VERSION"
  node etcd_auth auth member $((ETCD_PORT + 4)) peer=$((ETCD_PORT + 14)) data="$DIR/etcd/auth/data"
  deployment etcd_tls etcd "$ETCD_VERSION"
  node etcd_tls tls member $((ETCD_PORT + 5)) peer=$((ETCD_PORT + 15)) data="$DIR/etcd/tls/data"
}

# launch_etcd NAME CLIENT_PORT PEER_PORT CLUSTER STATE DEPLOYMENT: one etcd member.
launch_etcd() {
  local dir=$DIR/etcd/$1
  mkdir -p "$dir"
  etcd --name "$1" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$2" --advertise-client-urls "http://127.0.0.1:$2" \
    --listen-peer-urls "http://127.0.0.1:$3" --initial-advertise-peer-urls "http://127.0.0.1:$3" \
    --initial-cluster "$4" --initial-cluster-state "$5" --initial-cluster-token "omnilock-${1%%[0-9]*}" \
    --heartbeat-interval 100 --election-timeout 1000 --snapshot-count 100000 \
    --logger zap --log-outputs "$dir/etcd.log" >"$dir/stdout.log" 2>&1 </dev/null &
  record $! etcd TERM "$6/$1"
}

# restart_etcd N: start member N (1..3) of the cluster again on its data, after
# a test killed it.
restart_etcd() {
  local n=$1 cluster
  cluster=$(etcd_cluster)
  launch_etcd "e$n" $((ETCD_PORT + n)) $((ETCD_PORT + 10 + n)) "$cluster" existing etcd
}

# start_etcd_tls: one more member that speaks TLS to clients and requires a
# client certificate signed by a private CA (client port ETCD_PORT+5).
start_etcd_tls() {
  local tls=$DIR/etcd/tls port=$((ETCD_PORT + 5)) peer=$((ETCD_PORT + 15))
  tls_ca "$tls" omnilock-etcd-test-ca
  local who
  for who in server client; do
    tls_cert "$tls" "$who" "omnilock-$who" IP:127.0.0.1,DNS:localhost
  done
  etcd --name tls --data-dir "$tls/data" \
    --listen-client-urls "https://127.0.0.1:$port" --advertise-client-urls "https://127.0.0.1:$port" \
    --cert-file "$tls/server.crt" --key-file "$tls/server.key" \
    --trusted-ca-file "$tls/ca.crt" --client-cert-auth \
    --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
    --initial-cluster "tls=http://127.0.0.1:$peer" --initial-cluster-state new \
    --initial-cluster-token omnilock-tls --logger zap --log-outputs "$tls/etcd.log" \
    >"$tls/stdout.log" 2>&1 </dev/null &
  record $! etcd TERM etcd_tls/tls
  wait_for 60 "etcd TLS member" etcdctl --endpoints "https://127.0.0.1:$port" \
    --cacert "$tls/ca.crt" --cert "$tls/client.crt" --key "$tls/client.key" endpoint health
  export_url ETCD_TLS "etcds://127.0.0.1:$port/omnilock?tls_ca=$tls/ca.crt&tls_cert=$tls/client.crt&tls_key=$tls/client.key"
}

etcd_cluster() {
  local i members=()
  for i in 1 2 3; do members+=("e$i=http://127.0.0.1:$((ETCD_PORT + 10 + i))"); done
  (IFS=,; echo "${members[*]}")
}

start_etcd() {
  rm -rf "$DIR/etcd"
  local i cluster endpoints=()
  cluster=$(etcd_cluster)
  for i in 1 2 3; do
    launch_etcd "e$i" $((ETCD_PORT + i)) $((ETCD_PORT + 10 + i)) "$cluster" new etcd
    endpoints+=("127.0.0.1:$((ETCD_PORT + i))")
  done
  local auth_port=$((ETCD_PORT + 4))
  launch_etcd auth "$auth_port" $((ETCD_PORT + 14)) "auth=http://127.0.0.1:$((ETCD_PORT + 14))" new etcd_auth
  local all
  all=$(IFS=,; echo "${endpoints[*]}")
  wait_for 60 "etcd cluster" etcdctl --endpoints "$all" endpoint health
  wait_for 60 "etcd auth member" etcdctl --endpoints "127.0.0.1:$auth_port" endpoint health
  local ctl=(etcdctl --endpoints "127.0.0.1:$auth_port")
  "${ctl[@]}" user add "root:$TEST_PASSWORD" >/dev/null
  "${ctl[@]}" user grant-role root root >/dev/null
  "${ctl[@]}" user add "$TEST_USER:$TEST_PASSWORD" >/dev/null
  "${ctl[@]}" role add locker >/dev/null
  "${ctl[@]}" role grant-permission locker --prefix=true readwrite omnilock/ >/dev/null
  "${ctl[@]}" user grant-role "$TEST_USER" locker >/dev/null
  "${ctl[@]}" auth enable >/dev/null
  start_etcd_tls
  export_url ETCD "etcd://$all/omnilock"
  export_url ETCD_LOCKAPI "etcd://$all/omnilock?mode=lockapi"
  export_url ETCD_AUTH "etcd://$TEST_USER:$TEST_PASSWORD@127.0.0.1:$auth_port/omnilock"
  echo "export OMNILOCK_TEST_ETCD_FIRST_PORT=$((ETCD_PORT + 1))" >>"$ENV_FILE"
}
