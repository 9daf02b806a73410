# shellcheck shell=bash
# The TLS certificates MariaDB and PostgreSQL share.

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
