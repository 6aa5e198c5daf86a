# Shared by the bench scripts (sourced, not run): the servers a script starts, their
# cleanup, readiness, and the application directory a server loads.
#
# A script sets WORK (a temporary directory) and BENCH (the lyre-bench binary) before
# sourcing this; it records each server's process-group leader in PIDS.

PIDS=()

# Stops every recorded server group: TERM, a second's grace, then KILL.
cleanup() {
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true; done
  PIDS=()
}
trap 'cleanup; rm -rf "$WORK"' EXIT INT TERM

# Waits (up to two minutes) until something answers /health on port $1.
wait_health() {
  for _ in $(seq 1 600); do
    curl -fs -m 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server on port $1 did not start" >&2
  return 1
}

# Writes the application $2 (`ycsb` or `diff`: its schema is `lyre-bench $2-schema`)
# into the server root $1.
install_app() {
  mkdir -p "$1/components/$2"
  printf "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n" >"$1/components/$2/config.yaml"
  "$BENCH" "$2-schema" >"$1/components/$2/schema.graphql"
}
