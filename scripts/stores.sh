#!/usr/bin/env bash
# Starts (up) and stops (down) every store the tests need, on 127.0.0.1 with
# private ports and data directories under target/stores/.
#
#   scripts/stores.sh up     install what is missing, start, wait until ready,
#                            write target/stores/env (export OMNILOCK_TEST_<STORE>_URL=...)
#   scripts/stores.sh down   stop exactly the processes `up` started
#   scripts/stores.sh env    print the env file
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
# Each backend adds a start_<store> function below and lists it in STORES.
# A store's processes are recorded in target/stores/pids as "PID NAME"; `down`
# checks /proc/PID/cmdline still names that program before signalling it, so
# it never stops anything it did not start.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DIR=${OMNILOCK_STORES_DIR:-$ROOT/target/stores}
ENV_FILE=$DIR/env
PIDS=$DIR/pids

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

# Private ports (override with OMNILOCK_<STORE>_PORT).
MARIADB_PORT=${OMNILOCK_MARIADB_PORT:-33061}
POSTGRES_PORT=${OMNILOCK_POSTGRES_PORT:-54329}
# One instance on REDIS_PORT, five independent Redlock nodes on the next five.
REDIS_PORT=${OMNILOCK_REDIS_PORT:-63790}
# A Redis Cluster of 6 nodes (3 masters, 3 replicas) on REDIS_CLUSTER_PORT+0..5,
# their cluster bus on +1000..1005 (not Redis's +10000, which would pass
# 65535 for some bases); a TLS-only cluster of 3 masters on +16..18 (bus
# +1016..1018).
REDIS_CLUSTER_PORT=${OMNILOCK_REDIS_CLUSTER_PORT:-46380}
# Redis Sentinel: a master on REDIS_SENTINEL_PORT, its replica on +1, three
# sentinels on +2..4 watching the master as "omnilock-master".
REDIS_SENTINEL_PORT=${OMNILOCK_REDIS_SENTINEL_PORT:-46390}
# A 3-member etcd cluster: client ports ETCD_PORT+1..3, peer ports +11..13;
# one more member with authentication enabled on ETCD_PORT+4 (peer +14).
ETCD_PORT=${OMNILOCK_ETCD_PORT:-23790}
# A 3-node ZooKeeper ensemble on ZK_PORT+1..3 (quorum ports +1001..3, election
# +2001..3) and a standalone node on ZK_PORT+4.
ZK_PORT=${OMNILOCK_ZK_PORT:-21810}
# Test-only credentials for throw-away servers on 127.0.0.1.
TEST_USER=omnilock
TEST_PASSWORD=omnilock-test-pw
# The sentinels' own password, unlike the data nodes' (the library takes it
# apart, as ?sentinel_password=).
SENTINEL_PASSWORD=omnilock-sentinel-pw
SENTINEL_MASTER=omnilock-master

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

# as_postgres COMMAND...: PostgreSQL refuses to run as root, so root runs its
# programs as the postgres user (the package creates it); anyone else runs
# them as themselves.
as_postgres() {
  if [ "$(id -u)" -eq 0 ]; then
    runuser -u postgres -- "$@"
  else
    "$@"
  fi
}

# mariadb_user: mariadbd's --user, which only root may (and must) give.
mariadb_user() {
  [ "$(id -u)" -eq 0 ] && echo "--user=root"
  return 0
}

# record PID NAME [SIGNAL]: remember a process we started, the program name
# its command line must still show, and the signal that stops it cleanly.
record() { echo "$1 $2 ${3:-TERM}" >>"$PIDS"; }

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

# --- stores -----------------------------------------------------------------

start_sqlite() {
  # An embedded store: nothing to run, just a private database file.
  mkdir -p "$DIR/sqlite"
  rm -f "$DIR/sqlite/test.db" "$DIR/sqlite/test.db-wal" "$DIR/sqlite/test.db-shm"
  export_url SQLITE "sqlite://$DIR/sqlite/test.db"
}

# sql_tls_certs: the CA, server and client certificates of the TLS-enabled
# MariaDB and PostgreSQL, in $SQL_TLS (made again when missing or 20 days old).
# The server certificate names only IP:127.0.0.1, so that `localhost` is a
# wrong host name for the verify-full test. The client certificate's CN is
# the account that logs in by certificate.
SQL_TLS=$DIR/sql-tls
sql_tls_certs() {
  if [ -f "$SQL_TLS/client.crt" ] && [ -z "$(find "$SQL_TLS/ca.crt" -mtime +20)" ]; then
    return 0
  fi
  rm -rf "$SQL_TLS"
  tls_ca "$SQL_TLS" omnilock-sql-test-ca
  tls_cert "$SQL_TLS" server 127.0.0.1 IP:127.0.0.1
  tls_cert "$SQL_TLS" client omnilock_cert email:omnilock_cert@example.invalid
}

# The query options of a URL that verifies the test servers' certificates
# (PostgreSQL's names; MariaDB takes them too).
sql_tls_options() {
  echo "sslmode=verify-full&sslrootcert=$SQL_TLS/ca.crt"
}

# MariaDB and PostgreSQL allow far more connections than their defaults
# (151, 100): SQL advisory mode holds a connection per held lock, and its
# conformance scenarios hold 100+ locks in one client while other suites run.
launch_mariadb() {
  local data=$DIR/mariadb/data sock=$DIR/mariadb/mysqld.sock
  mariadbd --no-defaults --datadir="$data" --socket="$sock" --port="$MARIADB_PORT" \
    --bind-address=127.0.0.1 $(mariadb_user) --skip-name-resolve --innodb-buffer-pool-size=64M --max-connections=1000 \
    --ssl-ca="$SQL_TLS/ca.crt" --ssl-cert="$SQL_TLS/server.crt" --ssl-key="$SQL_TLS/server.key" \
    --log-error="$DIR/mariadb/error.log" --pid-file="$DIR/mariadb/mariadbd.pid" \
    >"$DIR/mariadb/stdout.log" 2>&1 </dev/null &
  record $! mariadbd
  wait_for 60 mariadb mariadb-admin --no-defaults --socket="$sock" -uroot ping
}

# restart_mariadb: stop the server we started and start it again on the same
# data, as a crash-free restart (used by the SQL backend's restart test).
restart_mariadb() {
  stop_recorded mariadbd
  launch_mariadb
}

start_mariadb() {
  local data=$DIR/mariadb/data sock=$DIR/mariadb/mysqld.sock
  rm -rf "$DIR/mariadb"
  mkdir -p "$data"
  sql_tls_certs
  mariadb-install-db --no-defaults --datadir="$data" $(mariadb_user) \
    --auth-root-authentication-method=normal --skip-test-db >"$DIR/mariadb/install.log" 2>&1
  launch_mariadb
  mariadb --no-defaults --socket="$sock" -uroot <<SQL
CREATE DATABASE omnilock;
CREATE USER '$TEST_USER'@'127.0.0.1' IDENTIFIED BY '$TEST_PASSWORD';
GRANT ALL ON omnilock.* TO '$TEST_USER'@'127.0.0.1';
CREATE USER '${TEST_USER}_tls'@'127.0.0.1' IDENTIFIED BY '$TEST_PASSWORD' REQUIRE SSL;
GRANT ALL ON omnilock.* TO '${TEST_USER}_tls'@'127.0.0.1';
CREATE USER '${TEST_USER}_cert'@'127.0.0.1' IDENTIFIED BY '$TEST_PASSWORD'
  REQUIRE SUBJECT '/CN=omnilock_cert';
GRANT ALL ON omnilock.* TO '${TEST_USER}_cert'@'127.0.0.1';
SQL
  export_url MYSQL "mysql://$TEST_USER:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock"
  # An account that may connect only over TLS, and one that must also show
  # the client certificate.
  export_url MYSQL_TLS "mysql://${TEST_USER}_tls:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock?$(sql_tls_options)"
  export_url MYSQL_CERT "mysql://${TEST_USER}_cert:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock?ssl-mode=VERIFY_IDENTITY&ssl-ca=$SQL_TLS/ca.crt&ssl-cert=$SQL_TLS/client.crt&ssl-key=$SQL_TLS/client.key"
  echo "export OMNILOCK_TEST_MARIADB_SOCKET='$sock'" >>"$ENV_FILE"
}

start_postgres() {
  local bin data=$DIR/postgres/data sock=$DIR/postgres
  bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -n 1)
  rm -rf "$DIR/postgres"
  mkdir -p "$data" "$sock/tls"
  sql_tls_certs
  # The server's key must belong to the server's user, mode 0600.
  cp "$SQL_TLS/ca.crt" "$SQL_TLS/server.crt" "$SQL_TLS/server.key" "$sock/tls/"
  chmod 0600 "$sock/tls/server.key"
  # Its files belong to whoever runs it (see as_postgres).
  [ "$(id -u)" -eq 0 ] && chown -R postgres:postgres "$DIR/postgres"
  as_postgres "$bin/initdb" -D "$data" -U postgres --auth-local=trust \
    --auth-host=scram-sha-256 >"$sock/initdb.log" 2>&1
  # First match wins: the _tls account only over TLS, the _cert account only
  # with a client certificate; everyone else as initdb set up.
  {
    echo "hostnossl all ${TEST_USER}_tls all reject"
    echo "hostnossl all ${TEST_USER}_cert all reject"
    echo "hostssl all ${TEST_USER}_cert 127.0.0.1/32 cert"
    cat "$data/pg_hba.conf"
  } >"$data/pg_hba.conf.new"
  mv "$data/pg_hba.conf.new" "$data/pg_hba.conf"
  [ "$(id -u)" -eq 0 ] && chown postgres:postgres "$data/pg_hba.conf"
  as_postgres "$bin/pg_ctl" -D "$data" -l "$sock/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $POSTGRES_PORT -k $sock -c max_connections=600 -c fsync=off -c ssl=on -c ssl_cert_file=$sock/tls/server.crt -c ssl_key_file=$sock/tls/server.key -c ssl_ca_file=$sock/tls/ca.crt" start >/dev/null
  record "$(head -n 1 "$data/postmaster.pid")" postgres INT
  as_postgres psql -q -h "$sock" -p "$POSTGRES_PORT" -U postgres -v ON_ERROR_STOP=1 <<SQL
CREATE USER $TEST_USER PASSWORD '$TEST_PASSWORD';
CREATE DATABASE omnilock OWNER $TEST_USER;
-- The TLS accounts act as $TEST_USER once logged in, so every test account
-- shares (and may create) the same tables.
CREATE USER ${TEST_USER}_tls PASSWORD '$TEST_PASSWORD' IN ROLE $TEST_USER;
CREATE USER ${TEST_USER}_cert IN ROLE $TEST_USER;
ALTER ROLE ${TEST_USER}_tls SET role = '$TEST_USER';
ALTER ROLE ${TEST_USER}_cert SET role = '$TEST_USER';
SQL
  export_url POSTGRES "postgres://$TEST_USER:$TEST_PASSWORD@127.0.0.1:$POSTGRES_PORT/omnilock"
  export_url POSTGRES_TLS "postgres://${TEST_USER}_tls:$TEST_PASSWORD@127.0.0.1:$POSTGRES_PORT/omnilock?$(sql_tls_options)"
  export_url POSTGRES_CERT "postgres://${TEST_USER}_cert@127.0.0.1:$POSTGRES_PORT/omnilock?$(sql_tls_options)&sslcert=$SQL_TLS/client.crt&sslkey=$SQL_TLS/client.key"
}

# launch_redis N PORT: one redis-server, no persistence (a restart loses every
# key, which the chaos harness's restart fault relies on).
launch_redis() {
  local dir=$DIR/redis/$1
  mkdir -p "$dir"
  redis-server --bind 127.0.0.1 --port "$2" --save "" --appendonly no --daemonize no \
    --requirepass "$TEST_PASSWORD" --dir "$dir" --logfile "$dir/redis.log" \
    >"$dir/stdout.log" 2>&1 </dev/null &
  record $! redis-server
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

# start_redis_tls: one more instance that speaks only TLS, with a private CA.
start_redis_tls() {
  local tls=$DIR/redis/tls port=$((REDIS_PORT + 6))
  tls_ca "$tls" omnilock-test-ca
  tls_cert "$tls" server 127.0.0.1 IP:127.0.0.1,DNS:localhost
  redis-server --bind 127.0.0.1 --port 0 --tls-port "$port" --tls-cert-file "$tls/server.crt" \
    --tls-key-file "$tls/server.key" --tls-ca-cert-file "$tls/ca.crt" --tls-auth-clients no \
    --save "" --appendonly no --requirepass "$TEST_PASSWORD" --dir "$tls" \
    --logfile "$tls/redis.log" >"$tls/stdout.log" 2>&1 </dev/null &
  record $! redis-server
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

# redis_cli PORT ARGS...: redis-cli against a data node with the test password.
redis_cli() {
  local port=$1
  shift
  redis-cli -p "$port" -a "$TEST_PASSWORD" --no-auth-warning "$@"
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
  record $! redis-server
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
  local i nodes=() ports=()
  for i in 0 1 2 3 4 5; do
    launch_redis_cluster "$i"
    nodes+=("127.0.0.1:$((REDIS_CLUSTER_PORT + i))")
    ports+=("$((REDIS_CLUSTER_PORT + i))")
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
  # Every node's port, for tests that find and kill a master.
  echo "export OMNILOCK_TEST_REDIS_CLUSTER_PORTS='${ports[*]}'" >>"$ENV_FILE"
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
    record $! redis-server
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
  record $! redis-server
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
  record $! redis-server
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
  local i sentinels=() ports=()
  for i in 0 1; do
    launch_sentinel_node "$i"
    ports+=("$((REDIS_SENTINEL_PORT + i))")
  done
  for i in 0 1; do
    wait_for 30 "redis sentinel data node $i" redis_ready $((REDIS_SENTINEL_PORT + i))
  done
  for i in 0 1 2; do
    launch_sentinel "$i"
    sentinels+=("127.0.0.1:$((REDIS_SENTINEL_PORT + 2 + i))")
    ports+=("$((REDIS_SENTINEL_PORT + 2 + i))")
  done
  wait_for 60 "redis sentinel" redis_sentinel_settled
  export_url REDIS_SENTINEL "redis+sentinel://:$TEST_PASSWORD@$(IFS=,; echo "${sentinels[*]}")/$SENTINEL_MASTER?sentinel_password=$SENTINEL_PASSWORD"
  # Master, replica, then the three sentinels.
  echo "export OMNILOCK_TEST_REDIS_SENTINEL_PORTS='${ports[*]}'" >>"$ENV_FILE"
}

# launch_etcd NAME CLIENT_PORT PEER_PORT CLUSTER STATE: one etcd member.
launch_etcd() {
  local dir=$DIR/etcd/$1
  mkdir -p "$dir"
  etcd --name "$1" --data-dir "$dir/data" \
    --listen-client-urls "http://127.0.0.1:$2" --advertise-client-urls "http://127.0.0.1:$2" \
    --listen-peer-urls "http://127.0.0.1:$3" --initial-advertise-peer-urls "http://127.0.0.1:$3" \
    --initial-cluster "$4" --initial-cluster-state "$5" --initial-cluster-token "omnilock-${1%%[0-9]*}" \
    --heartbeat-interval 100 --election-timeout 1000 --snapshot-count 100000 \
    --logger zap --log-outputs "$dir/etcd.log" >"$dir/stdout.log" 2>&1 </dev/null &
  record $! etcd
}

# restart_etcd N: start member N (1..3) of the cluster again on its data, after
# a test killed it.
restart_etcd() {
  local n=$1 cluster
  cluster=$(etcd_cluster)
  launch_etcd "e$n" $((ETCD_PORT + n)) $((ETCD_PORT + 10 + n)) "$cluster" existing
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
  record $! etcd
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
    launch_etcd "e$i" $((ETCD_PORT + i)) $((ETCD_PORT + 10 + i)) "$cluster" new
    endpoints+=("127.0.0.1:$((ETCD_PORT + i))")
  done
  local auth_port=$((ETCD_PORT + 4))
  launch_etcd auth "$auth_port" $((ETCD_PORT + 14)) "auth=http://127.0.0.1:$((ETCD_PORT + 14))" new
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

# launch_zk N: start ZooKeeper node N (its zoo.cfg is already written).
launch_zk() {
  local dir=$DIR/zk/$1
  # Empty lock containers are removed after 1 s instead of 60 s (tests check it).
  java -Xmx256m -XX:+UseSerialGC -Dznode.container.checkIntervalMs=1000 \
    -Dzookeeper.log.dir="$dir" \
    -cp /usr/share/java/zookeeper.jar:/usr/share/java/slf4j-simple.jar \
    org.apache.zookeeper.server.quorum.QuorumPeerMain "$dir/zoo.cfg" \
    >"$dir/server.log" 2>&1 </dev/null &
  record $! "zk/$1/zoo.cfg"
}

zk_ready() { echo srvr | nc -w 2 127.0.0.1 "$1" 2>/dev/null | grep -q '^Mode: '; }

# write_zk_config N PORT [SERVERS...]: a node's zoo.cfg and data dir.
write_zk_config() {
  local n=$1 port=$2 dir=$DIR/zk/$1
  shift 2
  mkdir -p "$dir/data"
  echo "$n" >"$dir/data/myid"
  {
    echo "tickTime=500"
    echo "initLimit=20"
    echo "syncLimit=10"
    echo "dataDir=$dir/data"
    echo "clientPort=$port"
    echo "clientPortAddress=127.0.0.1"
    echo "admin.enableServer=false"
    echo "4lw.commands.whitelist=*"
    echo "minSessionTimeout=1000"
    echo "maxSessionTimeout=120000"
    echo "forceSync=no"
    # Every client here comes from 127.0.0.1, and ZooKeeper refuses more
    # than 60 connections per address by default: 64 bench clients, or the
    # suites running side by side, would be turned away.
    echo "maxClientCnxns=1000"
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
  write_zk_config 4 $((ZK_PORT + 4))
  launch_zk 4
  for i in 1 2 3 4; do
    wait_for 90 "zookeeper node $i" zk_ready $((ZK_PORT + i))
  done
  export_url ZK "zk://$(IFS=,; echo "${hosts[*]}")/omnilock"
  export_url ZK_STANDALONE "zk://127.0.0.1:$((ZK_PORT + 4))/omnilock"
  export_url ZK_DIGEST "zk://$TEST_USER:$TEST_PASSWORD@$(IFS=,; echo "${hosts[*]}")/omnilock-acl"
  echo "export OMNILOCK_TEST_ZK_FIRST_PORT=$((ZK_PORT + 1))" >>"$ENV_FILE"
}

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
  log "ready; environment in $ENV_FILE"
}

# alive PID: the process exists and has not exited. An exited process the
# shell left behind stays a zombie until init reaps it, which on these
# machines takes a second or two.
alive() {
  [ -d "/proc/$1" ] && [ "$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)" != Z ]
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
  local pid name signal
  while read -r pid name signal; do
    [ "$name" = "$1" ] && stop "$pid" "$name" "$signal"
  done <"$PIDS"
  grep -v " $1 " "$PIDS" >"$PIDS.new" || true
  mv "$PIDS.new" "$PIDS"
}

down() {
  [ -f "$PIDS" ] || return 0
  local pid name signal
  while read -r pid name signal; do
    [ -n "$pid" ] || continue
    stop "$pid" "$name" "$signal"
  done <"$PIDS"
  rm -f "$PIDS"
  log "stopped"
}

case "${1:-}" in
  up) up ;;
  down) down ;;
  env) cat "$ENV_FILE" ;;
  deps)
    mkdir -p "$DIR"
    deps
    ;;
  restart)
    case "${2:-}" in
      mariadb) restart_mariadb ;;
      etcd) restart_etcd "${3:?member number 1..3}" ;;
      zookeeper) restart_zk "${3:?node number 1..3}" ;;
      redis) restart_redis "${3:?node number 0 (single) or 1..5 (Redlock)}" ;;
      redis-cluster) restart_redis_cluster "${3:?node number 0..5}" ;;
      redis-sentinel) restart_redis_sentinel "${3:?data node 0 (first master) or 1 (its replica)}" ;;
      *)
        echo "usage: $0 restart mariadb | restart etcd N | restart zookeeper N | restart redis N" \
          "| restart redis-cluster N | restart redis-sentinel N" >&2
        exit 64
        ;;
    esac
    ;;
  *)
    echo "usage: $0 up|down|env|deps|restart" >&2
    exit 64
    ;;
esac
