# shellcheck shell=bash
# MariaDB on MARIADB_PORT, with TLS (sql-tls.sh) and three accounts: plain,
# TLS-only, and by client certificate.

plan_mariadb() {
  deployment mariadb mariadb "$MARIADB_VERSION" max_connections="$MARIADB_MAX_CONNECTIONS"
  node mariadb 0 server "$MARIADB_PORT" data="$DIR/mariadb/data" \
    pid_file="$DIR/mariadb/mariadbd.pid" restart=mariadb
}

# mariadb_user: mariadbd's --user, which only root may (and must) give.
mariadb_user() {
  [ "$(id -u)" -eq 0 ] && echo "--user=root"
  return 0
}

# MariaDB allows far more connections than its default (see facts.sh).
launch_mariadb() {
  local data=$DIR/mariadb/data sock=$DIR/mariadb/mysqld.sock
  # shellcheck disable=SC2046
  mariadbd --no-defaults --datadir="$data" --socket="$sock" --port="$MARIADB_PORT" \
    --bind-address=127.0.0.1 $(mariadb_user) --skip-name-resolve --innodb-buffer-pool-size=64M \
    --max-connections="$MARIADB_MAX_CONNECTIONS" \
    --ssl-ca="$SQL_TLS/ca.crt" --ssl-cert="$SQL_TLS/server.crt" --ssl-key="$SQL_TLS/server.key" \
    --log-error="$DIR/mariadb/error.log" --pid-file="$DIR/mariadb/mariadbd.pid" \
    >"$DIR/mariadb/stdout.log" 2>&1 </dev/null &
  record $! mariadbd TERM mariadb/0
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
  # shellcheck disable=SC2046
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
-- An account of few connections: the server's limit, reached at will.
CREATE USER '${TEST_USER}_few'@'127.0.0.1' IDENTIFIED BY '$TEST_PASSWORD'
  WITH MAX_USER_CONNECTIONS 4;
GRANT ALL ON omnilock.* TO '${TEST_USER}_few'@'127.0.0.1';
SQL
  export_url MYSQL "mysql://$TEST_USER:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock"
  # An account that may connect only over TLS, and one that must also show
  # the client certificate.
  export_url MYSQL_TLS "mysql://${TEST_USER}_tls:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock?$(sql_tls_options)"
  export_url MYSQL_FEW "mysql://${TEST_USER}_few:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock"
  export_url MYSQL_CERT "mysql://${TEST_USER}_cert:$TEST_PASSWORD@127.0.0.1:$MARIADB_PORT/omnilock?ssl-mode=VERIFY_IDENTITY&ssl-ca=$SQL_TLS/ca.crt&ssl-cert=$SQL_TLS/client.crt&ssl-key=$SQL_TLS/client.key"
  echo "export OMNILOCK_TEST_MARIADB_SOCKET='$sock'" >>"$ENV_FILE"
}
