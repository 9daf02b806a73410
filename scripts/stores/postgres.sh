# shellcheck shell=bash
# PostgreSQL on POSTGRES_PORT (its socket in the store's directory), with TLS
# (sql-tls.sh) and three accounts: plain, TLS-only, and by client certificate.

plan_postgres() {
  deployment postgres postgres "$POSTGRES_VERSION" max_connections="$POSTGRES_MAX_CONNECTIONS"
  node postgres 0 server "$POSTGRES_PORT" data="$DIR/postgres/data" \
    pid_file="$DIR/postgres/data/postmaster.pid"
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
  # Far more connections than the default (see facts.sh).
  as_postgres "$bin/pg_ctl" -D "$data" -l "$sock/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $POSTGRES_PORT -k $sock -c max_connections=$POSTGRES_MAX_CONNECTIONS -c fsync=off -c ssl=on -c ssl_cert_file=$sock/tls/server.crt -c ssl_key_file=$sock/tls/server.key -c ssl_ca_file=$sock/tls/ca.crt" start >/dev/null
  record "$(head -n 1 "$data/postmaster.pid")" postgres INT postgres/0
  as_postgres psql -q -h "$sock" -p "$POSTGRES_PORT" -U postgres -v ON_ERROR_STOP=1 <<SQL
CREATE USER $TEST_USER PASSWORD '$TEST_PASSWORD';
CREATE DATABASE omnilock OWNER $TEST_USER;
-- The TLS accounts act as $TEST_USER once logged in, so every test account
-- shares (and may create) the same tables.
CREATE USER ${TEST_USER}_tls PASSWORD '$TEST_PASSWORD' IN ROLE $TEST_USER;
CREATE USER ${TEST_USER}_cert IN ROLE $TEST_USER;
ALTER ROLE ${TEST_USER}_tls SET role = '$TEST_USER';
ALTER ROLE ${TEST_USER}_cert SET role = '$TEST_USER';
-- An account of few connections: the server's limit, reached at will.
CREATE USER ${TEST_USER}_few PASSWORD '$TEST_PASSWORD' IN ROLE $TEST_USER CONNECTION LIMIT 4;
SQL
  export_url POSTGRES "postgres://$TEST_USER:$TEST_PASSWORD@127.0.0.1:$POSTGRES_PORT/omnilock"
  export_url POSTGRES_TLS "postgres://${TEST_USER}_tls:$TEST_PASSWORD@127.0.0.1:$POSTGRES_PORT/omnilock?$(sql_tls_options)"
  export_url POSTGRES_FEW "postgres://${TEST_USER}_few:$TEST_PASSWORD@127.0.0.1:$POSTGRES_PORT/omnilock"
  export_url POSTGRES_CERT "postgres://${TEST_USER}_cert@127.0.0.1:$POSTGRES_PORT/omnilock?$(sql_tls_options)&sslcert=$SQL_TLS/client.crt&sslkey=$SQL_TLS/client.key"
}
