#!/usr/bin/env bash
# A/B of two Lyre builds on this machine, with the harness compare-harper.sh uses for
# Harper: both servers run at once, each pinned to CPU 0 with one request thread; the
# load generator runs on CPU 1 and alternates between them round by round, so machine
# noise hits both. Each workload gets freshly started servers.
#
#   bench/compare-builds.sh OLD_LYRE_BINARY NEW_LYRE_BINARY
#   WORKLOADS="ycsb-c ycsb-a counters-hot" ROUNDS=5 bench/compare-builds.sh old/lyre new/lyre
#   DURABILITY=async WORKLOADS=ops-insert REPORT=2026-12-07-builds-insert bench/compare-builds.sh old/lyre new/lyre
#
# DURABILITY=async sets storage.writeAsync on both builds (default: each commit flushed).
# Results: bench/results/<date>-builds.md (REPORT names another), raw JSON in the
# folder of the same name.
# The ratio lines read "new/old" for throughput.
set -euo pipefail

OLD=$(realpath "${1:?usage: compare-builds.sh OLD_LYRE_BINARY NEW_LYRE_BINARY}")
NEW=$(realpath "${2:?usage: compare-builds.sh OLD_LYRE_BINARY NEW_LYRE_BINARY}")
ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
RECORDS=${RECORDS:-100000}
WORKLOADS=${WORKLOADS:-"ycsb-c ycsb-a counters-hot"}
DATE=$(date -u +%Y-%m-%d)
REPORT=${REPORT:-$DATE-builds}
OUT=$ROOT/bench/results/$REPORT
case ${DURABILITY:-default} in
  default) ASYNC=false ;;
  async) ASYNC=true ;;
  *) echo "DURABILITY is default or async" >&2; exit 2 ;;
esac
WORK=$(mktemp -d /tmp/lyre-ab.XXXXXX)

source "$ROOT/bench/lib.sh"

# Starts binary $1 on CPU 0 with ports $2 (Operations API) and $3 (REST), root under
# $4, the YCSB application when $5 is set; sets STARTED_PID.
start() {
  local dir=$WORK/$4
  mkdir -p "$dir"
  [ -n "${5:-}" ] && install_app "$dir/root" ycsb
  setsid taskset -c 0 env HDB_ADMIN_USERNAME=admin HDB_ADMIN_PASSWORD=password OPERATIONSAPI_NETWORK_PORT="$2" \
    HTTP_PORT="$3" MQTT_NETWORK_PORT=$(($2 + 100)) LOGGING_LEVEL=warn THREADS_COUNT=1 STORAGE_WRITEASYNC="$ASYNC" "$1" run --root "$dir/root" >"$dir/lyre.log" 2>&1 &
  STARTED_PID=$!
  PIDS+=("$STARTED_PID")
  wait_health "$2"
}

run_workload() {
  local name=$1 app=""; shift
  case $name in ycsb-* | counters-* | ws-*) app=ycsb ;; esac
  start "$NEW" 9945 9946 "new-$name" $app
  local new_pid=$STARTED_PID
  start "$OLD" 9955 9956 "old-$name" $app
  local old_pid=$STARTED_PID
  taskset -c 1 "$BENCH" "$@" --rounds "$ROUNDS" --settle 5 \
    --name new --url http://127.0.0.1:9945 --rest http://127.0.0.1:9946 --pid "$new_pid" \
    --compare-name old --compare-url http://127.0.0.1:9955 --compare-rest http://127.0.0.1:9956 --compare-pid "$old_pid" \
    --json "$OUT/$name.json" | tee "$OUT/$name.txt"
  cleanup
}

mkdir -p "$OUT"
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
for workload in $WORKLOADS; do
  args=$(workload_args "$workload")
  # shellcheck disable=SC2086 # the arguments are words
  run_workload "$workload" $args
done

{
  echo "# Lyre A/B: new build against old build — $DATE, storage.writeAsync=$ASYNC"
  echo
  echo "old: \`$(basename "$OLD")\`, new: \`$(basename "$NEW")\`. Servers pinned to CPU 0, load on CPU 1, $ROUNDS alternating rounds, medians (min–max)."
  echo
  for workload in $WORKLOADS; do
    echo "## $workload"
    echo
    echo '```'
    cat "$OUT/$workload.txt"
    echo '```'
    echo
  done
} >"$ROOT/bench/results/$REPORT.md"
