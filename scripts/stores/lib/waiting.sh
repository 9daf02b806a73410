# shellcheck shell=bash
# Waiting for a store to answer, and the env file the tests read.
# Sourced by scripts/stores.sh.

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
