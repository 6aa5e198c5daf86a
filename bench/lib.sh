# Shared by the bench scripts (sourced, not run): the servers a script starts, their
# cleanup, readiness, and the application directory a server loads.
#
# A script sets WORK (a temporary directory) before sourcing this; it records each
# server's process-group leader in PIDS.

# Where the builds and Harper 4.7 live, unless the script set them before sourcing.
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/lyre-target}
LYRE=${LYRE:-$CARGO_TARGET_DIR/release/lyre}
BENCH=${BENCH:-$CARGO_TARGET_DIR/release/lyre-bench}
HARPER_DIR=${LYRE_BENCH_CACHE:-$HOME/.cache/lyre-bench}/harper-4.7.29
# The ports of the Lyre a script starts with `start_lyre` (Harper keeps its defaults).
LYRE_PORT=${LYRE_PORT:-9935}
LYRE_REST=${LYRE_REST:-9936}

PIDS=()

# Stops every recorded server group: TERM, a second's grace, then KILL.
cleanup() {
  # A server a round stopped (PAUSED) is let go on first, so it can shut down.
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -CONT -- "-$pid" 2>/dev/null || true; done
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -TERM -- "-$pid" 2>/dev/null || true; done
  sleep 1
  for pid in "${PIDS[@]:-}"; do [ -n "$pid" ] && kill -KILL -- "-$pid" 2>/dev/null || true; done
  PIDS=()
}
# KEEP=1 leaves the work directory (profiles, logs) for reading afterwards.
trap 'cleanup; if [ -n "${KEEP:-}" ]; then echo "kept $WORK" >&2; else rm -rf "$WORK"; fi' EXIT INT TERM

# Waits (up to two minutes) until something answers /health on port $1.
wait_health() {
  for _ in $(seq 1 600); do
    curl -fs -m 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1 && return 0
    sleep 0.2
  done
  echo "server on port $1 did not start" >&2
  return 1
}

# Writes the application $2 into the server root $1: `ycsb` or `diff` (its schema is
# `lyre-bench $2-schema`), or `cache` for server $3 (`lyre` or `harper`), whose
# origin is a `lyre-bench ceiling` on port 9950 (`lyre-bench cache-app`).
install_app() {
  if [ "$2" = cache ]; then
    "$BENCH" cache-app --server "$3" --origin http://127.0.0.1:9950 --dir "$1/components/cache"
    return
  fi
  mkdir -p "$1/components/$2"
  printf "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n" >"$1/components/$2/config.yaml"
  "$BENCH" "$2-schema" >"$1/components/$2/schema.graphql"
}

# Harper 4.7.29 (scripts set HARPER_DIR, where it is installed, and ASYNC, its
# storage.writeAsync).
install_harper() {
  if [ ! -d "$HARPER_DIR/node_modules/harperdb" ]; then
    mkdir -p "$HARPER_DIR"
    (cd "$HARPER_DIR" && npm install --no-audit --no-fund --loglevel=error harperdb@4.7.29)
  fi
}

# Fails if something already answers on `port`: a leftover server would silently
# take part of the load.
port_free() {
  if curl -fs -m 2 "http://127.0.0.1:$1/health" >/dev/null 2>&1; then
    echo "port $1 is already in use; stop the server there first" >&2
    return 1
  fi
}

# Launches Harper on CPU 0 with root `$1` and writeAsync `$2`; sets HARPER_PID. setsid
# makes it a process-group leader, so the whole npm tree can be stopped by its group.
launch_harper() {
  setsid taskset -c 0 env -C "$HARPER_DIR" HOME="$1/home" TC_AGREEMENT=yes HDB_ADMIN_USERNAME=admin \
    HDB_ADMIN_PASSWORD=password ROOTPATH="$1/root" REPLICATION_HOSTNAME=localhost DEFAULTS_MODE=dev \
    THREADS_COUNT=1 STORAGE_WRITEASYNC="$2" LOGGING_LEVEL=warn npx harperdb run >>"$1/harper.log" 2>&1 &
  HARPER_PID=$!
  PIDS+=("$HARPER_PID")
}

# Starts a fresh Harper on CPU 0; sets HARPER_PID (its process group leader).
start_harper() {
  port_free 9925
  local dir=$WORK/harper-$1
  mkdir -p "$dir/home"
  if [ "$ASYNC" = true ] || [ -n "${2:-}" ]; then
    # Harper installs on first start; an application is picked up on the next one.
    # Harper 4.7 also cannot install with writeAsync on ("Can not set noSync on a
    # database that was opened with overlappingSync"). So: install, stop, start again.
    launch_harper "$dir" false
    wait_health 9925
    kill -TERM -- "-$HARPER_PID"
    while curl -fs -m 1 http://127.0.0.1:9925/health >/dev/null 2>&1; do sleep 0.2; done
    sleep 1
    [ -n "${2:-}" ] && install_app "$dir/root" "$2" harper
  fi
  launch_harper "$dir" "$ASYNC"
  wait_health 9925
}

# Harper 5, built from source by ../shared/tools/harper5.sh (HARPER5 overrides where
# that script is), on CPU 0 with root $WORK/harper5-$1 and ports H5_OPS, H5_REST;
# `$2 <root>` writes the application into the root. Requires credentials from
# localhost too (as Lyre does). The first run installs (without writeAsync, which an
# install cannot take), the second loads the application with storage.writeAsync
# $ASYNC. Sets HARPER_PID.
HARPER5=${HARPER5:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/shared/tools/harper5.sh}
H5_OPS=${H5_OPS:-19925}
H5_REST=${H5_REST:-19926}
start_harper5() {
  local root=$WORK/harper5-$1 pid
  [ -d "$HOME/.cache/harper5/src" ] || { echo "Harper 5 is needed: HARPER_MIRROR=<git dir> $HARPER5 setup" >&2; return 1; }
  port_free "$H5_OPS"
  setsid "$HARPER5" run "$root" "$H5_OPS" "$H5_REST" 11883 >"$root.log" 2>&1 &
  pid=$!
  wait_health "$H5_OPS"
  kill -TERM -- "-$pid"
  while curl -fs -m 1 "http://127.0.0.1:$H5_OPS/health" >/dev/null 2>&1; do sleep 0.2; done
  sleep 1
  "$2" "$root"
  setsid taskset -c 0 env HARPER5_STRICT_AUTH=1 LOGGING_LEVEL=warn STORAGE_WRITEASYNC="${ASYNC:-false}" \
    "$HARPER5" run "$root" "$H5_OPS" "$H5_REST" 11883 >>"$root.log" 2>&1 &
  HARPER_PID=$!
  PIDS+=("$HARPER_PID")
  wait_health "$H5_OPS"
}

# Starts a fresh Lyre on CPU 0 (with the YCSB application when $2 is set); sets LYRE_PID.
# Optional: $3 the binary (default $LYRE), $4 and $5 its Operations API and REST ports
# (default $LYRE_PORT, $LYRE_REST); THREADS (default 1) request threads.
start_lyre() {
  local binary=${3:-$LYRE} ops=${4:-$LYRE_PORT} rest=${5:-$LYRE_REST}
  port_free "$ops"
  local dir=$WORK/lyre-$1
  mkdir -p "$dir"
  [ -n "${2:-}" ] && install_app "$dir/root" "$2" lyre
  setsid taskset -c 0 env HDB_ADMIN_USERNAME=admin HDB_ADMIN_PASSWORD=password OPERATIONSAPI_NETWORK_PORT="$ops" \
    HTTP_PORT="$rest" MQTT_NETWORK_PORT=$((ops + 10)) STORAGE_WRITEASYNC="${ASYNC:-false}" LOGGING_LEVEL=warn \
    THREADS_COUNT="${THREADS:-1}" "$binary" run --root "$dir/root" >"$dir/lyre.log" 2>&1 &
  LYRE_PID=$!
  PIDS+=("$LYRE_PID")
  wait_health "$ops"
}

# The lyre-bench arguments of the workload named $1, over $RECORDS records; fails on
# an unknown name. The names are what WORKLOADS lists in compare-harper.sh and
# compare-builds.sh (`cache-*` only in compare-harper.sh, which starts their origin).
workload_args() {
  case $1 in
    ops-insert) echo "ops-insert --records $RECORDS --batch 1000 --concurrency 4" ;;
    csv-load) echo "csv-load --rows ${CSV_ROWS:-1000000}" ;;
    ops-search-id) echo "ops-search --kind id --records $RECORDS --requests 10000 --concurrency 16" ;;
    ops-search-value) echo "ops-search --kind value --records $RECORDS --requests 10000 --concurrency 16" ;;
    ops-search-conditions) echo "ops-search --kind conditions --records $RECORDS --requests 5000 --concurrency 16" ;;
    ycsb-*) echo "ycsb ${1#ycsb-} --records $RECORDS --operations 100000 --concurrency 32" ;;
    counters-hot) echo "counters --keys 1 --operations 50000 --concurrency 64" ;;
    sql-point) echo "sql --kind point --requests 5000 --concurrency 16" ;;
    sql-like) echo "sql --kind like --requests 100 --concurrency 4" ;;
    sql-range) echo "sql --kind range --requests 50 --concurrency 4" ;;
    sql-group) echo "sql --kind group --requests 5 --concurrency 1" ;;
    sql-join) echo "sql --kind join --requests 3 --concurrency 1" ;;
    counters-spread) echo "counters --keys 1000 --operations 50000 --concurrency 64" ;;
    cache-miss) echo "cache miss --operations ${CACHE_OPS:-20000} --concurrency 32" ;;
    cache-hit) echo "cache hit --records ${CACHE_RECORDS:-10000} --operations ${CACHE_OPS:-100000} --concurrency 32" ;;
    ws-fanout) echo "ws --subscribers ${SUBSCRIBERS:-100} --writes ${WS_WRITES:-2000} --concurrency ${WS_WRITERS:-1}" ;;
    *) echo "unknown workload $1" >&2; return 2 ;;
  esac
}

# One wrk round (`wrk -t1 -c32` on CPU 1, CONNECTIONS overriding 32, for SECONDS_PER_ROUND seconds with Lua script
# $5) against the server of process $3 on port $4: appends "round, name, requests/s,
# p50 µs, p99 µs, server CPU µs per request (from /proc), non-2xx" to
# $WORK/rounds.tsv and prints it. Round $1, server name $2. The process groups in
# PAUSED (space-separated leaders' pids: the other servers sharing the CPU) are
# stopped for the round, so the server measured is alone on its CPU: an idle Harper's
# timers and collector take about 7% of a core.
wrk_round() {
  local round=$1 name=$2 pid=$3 port=$4 script=$5 before after out rps requests errors p50 p99 cpu paused
  for paused in ${PAUSED:-}; do kill -STOP -- "-$paused"; done
  before=$(cpu_ticks "$pid")
  out=$(taskset -c 1 wrk -t1 -c"${CONNECTIONS:-32}" -d"${SECONDS_PER_ROUND}s" --latency -s "$script" "http://127.0.0.1:$port")
  after=$(cpu_ticks "$pid")
  for paused in ${PAUSED:-}; do kill -CONT -- "-$paused"; done
  rps=$(awk '/Requests\/sec/ {print $2}' <<<"$out")
  requests=$(awk '/requests in/ {print $1}' <<<"$out")
  errors=$(awk '/Non-2xx/ {print $5}' <<<"$out")
  p50=$(to_us "$(awk '$1 == "50%" {print $2}' <<<"$out")")
  p99=$(to_us "$(awk '$1 == "99%" {print $2}' <<<"$out")")
  cpu=$(awk -v a="$before" -v b="$after" -v t="$(getconf CLK_TCK)" -v n="$requests" 'BEGIN { printf "%.2f", (b - a) * 1e6 / t / n }')
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$round" "$name" "$rps" "$p50" "$p99" "$cpu" "${errors:-0}" | tee -a "$WORK/rounds.tsv"
}

# A process's user + system time so far, in clock ticks.
cpu_ticks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# Converts wrk's latency ("612.00us", "1.23ms", "2.01s") to µs.
to_us() { awk -v t="$1" 'BEGIN { n = t + 0; if (t ~ /us$/) print n; else if (t ~ /ms$/) print n * 1000; else print n * 1000000 }'; }

# awk functions for reports over rounds.tsv: median(list) and span(list) ("min–max")
# of a space-separated list of numbers. Prepend to an awk program.
ROUND_STATS='
    function median(list,   n, a, i, j, t) {
      n = split(list, a, " ")
      for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++) if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
      return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    function span(list,   n, a, i, lo, hi) {
      n = split(list, a, " "); lo = a[1]; hi = a[1]
      for (i = 2; i <= n; i++) { if (a[i] + 0 < lo + 0) lo = a[i]; if (a[i] + 0 > hi + 0) hi = a[i] }
      return sprintf("%.0f–%.0f", lo, hi)
    }'
