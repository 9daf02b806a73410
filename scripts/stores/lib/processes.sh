# shellcheck shell=bash
# The records of the processes `up` started (target/stores/pids, one
# "PID NAME SIGNAL NODE" line each), and stopping exactly those.
# Sourced by scripts/stores.sh (which sets PIDS).

# alive PID: the process exists and has not exited. An exited process the
# shell left behind stays a zombie until init reaps it, which on these
# machines takes a second or two.
alive() {
  [ -d "/proc/$1" ] && [ "$(awk '/^State:/ { print $2 }' "/proc/$1/status" 2>/dev/null)" != Z ]
}

# record PID NAME [SIGNAL [NODE]]: remember a process we started, the program
# name its command line must still show, the signal that stops it cleanly,
# and the topology node it runs (DEPLOYMENT/NAME). A node's earlier records
# whose process is gone are dropped. Fault tests and chaos runs restart
# nodes of different deployments at once, so each rewrite of the records
# holds a lock (in a subshell: no store process started later inherits it).
record() {
  local key=${4:--}
  (
    flock 9
    if [ "$key" != - ] && [ -s "$PIDS" ]; then
      local pid name signal node
      while read -r pid name signal node; do
        [ "${node:--}" = "$key" ] && ! alive "$pid" && continue
        echo "$pid $name $signal ${node:--}"
      done <"$PIDS" >"$PIDS.new"
      mv "$PIDS.new" "$PIDS"
    fi
    echo "$1 $2 ${3:-TERM} $key" >>"$PIDS"
  ) 9>>"$PIDS.lock"
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
  local pid name signal node
  while read -r pid name signal node; do
    [ "$name" = "$1" ] && stop "$pid" "$name" "$signal"
  done <"$PIDS"
  (
    flock 9
    grep -v " $1 " "$PIDS" >"$PIDS.new" || true
    mv "$PIDS.new" "$PIDS"
  ) 9>>"$PIDS.lock"
}
