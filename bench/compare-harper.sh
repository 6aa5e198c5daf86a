#!/usr/bin/env bash
# Side-by-side benchmark of Lyre against Harper (4.7.29, or 5 with HARPER=5) on this machine.
#
# Both servers run at once, each pinned to CPU 0; the load generator runs on CPU 1 and
# alternates between them round by round (A B A B ...), so machine noise hits both.
# Each workload gets freshly started servers. Results: bench/results/<date>.md plus the
# raw JSON of every run under bench/results/<date>/.
#
#   bench/compare-harper.sh                       # default durability on both sides
#   DURABILITY=async bench/compare-harper.sh      # storage.writeAsync=true on both
#   WORKLOADS="ops-insert" ROUNDS=5 bench/compare-harper.sh
#   WORKLOADS="counters-hot counters-spread" bench/compare-harper.sh
#   WORKLOADS="cache-miss cache-hit" bench/compare-harper.sh   # a caching table
#   HARPER=5 DURABILITY=async WORKLOADS="ops-insert counters-spread" bench/compare-harper.sh
#
# HARPER=5 compares with Harper 5 built from source (../shared/tools/harper5.sh setup)
# instead of Harper 4.7.29; its results go to bench/results/<date>-<durability>-harper5.
# Results of earlier invocations on the same day and durability stay in the report;
# REPORT=<name> starts another (bench/results/<name>.md), for a new build's figures.
#
# Both run one request thread (THREADS_COUNT=1) on their one core.
# Durability: "default" is each server's default (Lyre flushes every commit to disk
# before acknowledging it; Harper 4.7 acknowledges on commit and flushes in the
# background, lmdb-js overlappingSync). "async" sets storage.writeAsync=true on both:
# neither flushes, both survive a process crash, neither promises an OS crash.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
DURABILITY=${DURABILITY:-default}
ROUNDS=${ROUNDS:-3}
RECORDS=${RECORDS:-100000}
WORKLOADS=${WORKLOADS:-"ops-insert ops-search-id ops-search-value ycsb-c ycsb-a"}
DATE=$(date -u +%Y-%m-%d)
HARPER=${HARPER:-1}
case $HARPER in
  1) SUFFIX="" HARPER_NAME="Harper 4.7.29" ;;
  5) SUFFIX="-harper5" HARPER_NAME="Harper 5" ;;
  *) echo "HARPER is 1 (4.7.29) or 5" >&2; exit 2 ;;
esac
REPORT=${REPORT:-$DATE-$DURABILITY$SUFFIX}
OUT=$ROOT/bench/results/$REPORT
WORK=$(mktemp -d /tmp/lyre-bench.XXXXXX)
ASYNC=false
[ "$DURABILITY" = async ] && ASYNC=true

source "$ROOT/bench/lib.sh"

run_workload() {
  local name=$1 app=""; shift
  case $name in ycsb-* | counters-* | ws-*) app=ycsb ;; cache-*) app=cache ;; esac
  if [ "$app" = cache ]; then
    # The origin both caches call: bare hyper answering a fixed record, beside the
    # load generator on CPU 1 (it serves both servers' misses alike).
    setsid taskset -c 1 "$BENCH" ceiling --port 9950 >/dev/null 2>&1 &
    PIDS+=("$!")
    wait_health 9950
  fi
  local harper_node harper_ops=9925 harper_rest=9926
  if [ "$HARPER" = 5 ]; then
    # The application (if any) is written into Harper 5's root between its install
    # and its start; harper5.sh execs node, so its process is the server.
    harper5_app() { [ -z "$app" ] || install_app "$1" "$app" harper; }
    start_harper5 "$name" harper5_app
    harper_node=$HARPER_PID harper_ops=$H5_OPS harper_rest=$H5_REST
  else
    start_harper "$name" $app
    # Harper runs under npm: measure the node process that serves (the newest match).
    harper_node=$(pgrep -n -f "harperdb run" || echo "$HARPER_PID")
  fi
  start_lyre "$name" $app
  taskset -c 1 "$BENCH" "$@" --rounds "$ROUNDS" --settle 30 \
    --name lyre --url "http://127.0.0.1:$LYRE_PORT" --rest "http://127.0.0.1:$LYRE_REST" --pid "$LYRE_PID" \
    --compare-name harper --compare-url "http://127.0.0.1:$harper_ops" --compare-rest "http://127.0.0.1:$harper_rest" \
    --compare-pid "$harper_node" \
    --json "$OUT/$name.json" | tee "$OUT/$name.txt"
  cleanup
}

mkdir -p "$OUT"
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
[ "$HARPER" = 1 ] && install_harper
for workload in $WORKLOADS; do
  args=$(workload_args "$workload")
  # shellcheck disable=SC2086 # the arguments are words
  run_workload "$workload" $args
done

# The ceiling for REST reads: bare hyper answering a fixed record, same pinning.
if [[ " $WORKLOADS " == *" ycsb-c "* ]]; then
  setsid taskset -c 0 "$BENCH" ceiling --port 9950 >/dev/null 2>&1 &
  PIDS+=("$!")
  wait_health 9950
  taskset -c 1 "$BENCH" ycsb c --records 1 --operations 100000 --concurrency 32 --rounds "$ROUNDS" --settle 0 \
    --name hyper-ceiling --url http://127.0.0.1:9950 --rest http://127.0.0.1:9950 --pid "${PIDS[-1]}" \
    --json "$OUT/ceiling.json" | tee "$OUT/ceiling.txt"
  cleanup
fi

# Every workload run today at this durability, including earlier invocations.
done_workloads=$(cd "$OUT" && ls ./*.txt | sed 's|^\./||; s|\.txt$||' | grep -v '^ceiling$' || true)
jsons=()
for workload in $done_workloads; do [ -f "$OUT/$workload.json" ] && jsons+=("$OUT/$workload.json"); done
"$BENCH" chart --out "$ROOT/bench/results/$REPORT.png" "${jsons[@]}"

{
  echo "# Lyre vs $HARPER_NAME — $DATE, durability: $DURABILITY"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/{print $2}') GiB."
  echo "Servers pinned to CPU 0, load generator on CPU 1, $ROUNDS alternating rounds, medians (min–max)."
  echo
  for workload in $done_workloads; do
    echo "## $workload"
    echo
    echo '```'
    cat "$OUT/$workload.txt"
    echo '```'
    echo
  done
  if [ -f "$OUT/ceiling.txt" ]; then
    echo "## REST GET ceiling: bare hyper returning a fixed record"
    echo
    echo '```'
    cat "$OUT/ceiling.txt"
    echo '```'
  fi
  echo
  echo "![throughput and p99]($REPORT.png)"
} >"$ROOT/bench/results/$REPORT.md"
echo "wrote bench/results/$REPORT.md"
