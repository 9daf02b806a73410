# shellcheck shell=bash
# SQLite: an embedded store, nothing to run, just a private database file.

plan_sqlite() {
  deployment sqlite sqlite ""
  node sqlite file file - data="$DIR/sqlite"
}

start_sqlite() {
  mkdir -p "$DIR/sqlite"
  rm -f "$DIR/sqlite/test.db" "$DIR/sqlite/test.db-wal" "$DIR/sqlite/test.db-shm"
  export_url SQLITE "sqlite://$DIR/sqlite/test.db"
}
