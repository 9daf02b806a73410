# shellcheck shell=bash
# The facts of the test topology that more than one place needs: sourced by
# scripts/stores.sh (which builds target/stores/topology.json from them), and
# read line by line by tests/docker_compose.rs, which checks docker/compose.yaml
# against them. Plain NAME=value lines only (no expansions, no quotes), so
# that both can read them.

# Default base ports (a store's nodes sit at fixed offsets from its base; the
# store's file under scripts/stores/ documents them). OMNILOCK_<STORE>_PORT
# overrides one base; OMNILOCK_STORES_PORT_OFFSET shifts every default.
MARIADB_PORT=33061
POSTGRES_PORT=54329
REDIS_PORT=63790
REDIS_CLUSTER_PORT=46380
REDIS_SENTINEL_PORT=46390
ETCD_PORT=23790
ZK_PORT=21810

# The versions the Debian packages give (bookworm); docker/compose.yaml pins
# the same major.minor.
MARIADB_VERSION=10.11
POSTGRES_VERSION=15
REDIS_VERSION=7.0
ETCD_VERSION=3.4
ZOOKEEPER_VERSION=3.8

# Connection limits, far above the defaults (MariaDB 151, PostgreSQL 100,
# ZooKeeper 60 per client address): SQL advisory mode holds a connection per
# held lock, and every client here comes from 127.0.0.1.
MARIADB_MAX_CONNECTIONS=1000
POSTGRES_MAX_CONNECTIONS=600
ZK_MAX_CLIENT_CNXNS=1000
# ZooKeeper's tick (session timeouts from 2 ticks) and longest session.
ZK_TICK_TIME=500
ZK_MAX_SESSION_TIMEOUT=120000

# Test-only credentials for throw-away servers on 127.0.0.1.
TEST_USER=omnilock
TEST_PASSWORD=omnilock-test-pw
# The sentinels' own password, unlike the data nodes' (the library takes it
# apart, as ?sentinel_password=), and the name they watch the master by.
SENTINEL_PASSWORD=omnilock-sentinel-pw
SENTINEL_MASTER=omnilock-master
