#!/usr/bin/env bash
# Vector search side by side (`lyre-bench vector`): Lyre and Harper 4.7.29, each
# pinned to CPU 0 with one request thread, the load generator on CPU 1; and two
# libraries in process on CPU 0 with one thread: hnswlib from PyPI, the anchor,
# and Lyre's own graph (`lyre-bench vector-library`). All get the same seeded
# dataset and the same declaration (L2, M 16, efConstruction 100). Results: bench/results/<date>-vector-<n>x<d>.{md,png} and
# the raw JSON beside them.
#
#   bench/vector.sh                                   # 100,000 x 128-d
#   VECTORS=20000 QUERIES=500 bench/vector.sh
#   VECTORS=1000000 DIMENSIONS=96 HARPER=no bench/vector.sh   # without Harper
#   INT8=yes bench/vector.sh                          # Lyre with quantization: "int8"
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
VECTORS=${VECTORS:-100000}
DIMENSIONS=${DIMENSIONS:-128}
CLUSTERS=${CLUSTERS:-1000}
QUERIES=${QUERIES:-1000}
EFS=${EFS:-10,20,40,80,160}
ROUNDS=${ROUNDS:-3}
HARPER=${HARPER:-yes}
INT8=${INT8:-no}
DATE=$(date -u +%Y-%m-%d)
NAME=$DATE-vector-${VECTORS}x${DIMENSIONS}$([ "$INT8" = yes ] && echo -int8 || true)
OUT=$ROOT/bench/results/$NAME
WORK=$(mktemp -d /tmp/lyre-bench.XXXXXX)
ASYNC=false

source "$ROOT/bench/lib.sh"

mkdir -p "$OUT"
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
DATA=$WORK/data
DATASET=(--vectors "$VECTORS" --dimensions "$DIMENSIONS" --clusters "$CLUSTERS" --queries "$QUERIES" --ef "$EFS")
taskset -c 1 "$BENCH" vector "${DATASET[@]}" --dataset-only --data-dir "$DATA"

# The anchor: hnswlib in a virtual environment of its own.
VENV=${LYRE_BENCH_CACHE:-$HOME/.cache/lyre-bench}/pyvenv
if ! "$VENV/bin/python" -c "import hnswlib, numpy" 2>/dev/null; then
  python3 -m venv "$VENV"
  "$VENV/bin/pip" install --quiet hnswlib numpy
fi
taskset -c 0 "$VENV/bin/python" "$ROOT/bench/hnswlib-anchor.py" "$DATA" "$EFS" >"$OUT/hnswlib.json"
# Lyre's own graph measured the same way: the library without the server around it.
taskset -c 0 "$BENCH" vector-library --data-dir "$DATA" --ef "$EFS" >"$OUT/lyre-vector.json"

if [ "$INT8" = yes ]; then
  app=$WORK/lyre-vector/root/components/vector
  mkdir -p "$app"
  printf "rest: true\ngraphqlSchema:\n  files: '*.graphql'\n" >"$app/config.yaml"
  "$BENCH" vector-schema --quantization >"$app/schema.graphql"
  start_lyre vector
else
  start_lyre vector vector
fi
COMPARE=()
if [ "$HARPER" = yes ]; then
  install_harper
  start_harper vector vector
  harper_node=$(pgrep -n -f "harperdb run" || echo "$HARPER_PID")
  # Harper 4.7 takes no per-query breadth: it is measured at its default.
  COMPARE=(--compare-name harper --compare-url http://127.0.0.1:9925 --compare-rest http://127.0.0.1:9926
    --compare-pid "$harper_node" --default-ef-only harper)
fi
taskset -c 1 "$BENCH" vector "${DATASET[@]}" --data-dir "$DATA" --rounds "$ROUNDS" --settle 5 \
  --anchor "$OUT/hnswlib.json" --anchor "$OUT/lyre-vector.json" --chart "$ROOT/bench/results/$NAME.png" --json "$OUT/vector.json" \
  --name lyre --url "http://127.0.0.1:$LYRE_PORT" --rest "http://127.0.0.1:$LYRE_REST" --pid "$LYRE_PID" \
  "${COMPARE[@]}" | tee "$OUT/vector.txt"
cleanup

# The HTTP stack's bound for these queries: bare hyper reading and parsing each
# QUERY body and answering ten fixed ids (recall 0: it searches nothing).
setsid taskset -c 0 "$BENCH" ceiling --port 9950 >/dev/null 2>&1 &
PIDS+=("$!")
wait_health 9950
taskset -c 1 "$BENCH" vector "${DATASET[@]}" --ef 10 --data-dir "$DATA" --rounds "$ROUNDS" --settle 0 --skip-build \
  --name hyper-ceiling --url http://127.0.0.1:9950 --rest http://127.0.0.1:9950 --pid "${PIDS[-1]}" \
  --json "$OUT/ceiling.json" | tee "$OUT/ceiling.txt"
cleanup

{
  echo "# Vector search — $DATE, $VECTORS x $DIMENSIONS-d"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), $(free -g | awk '/Mem:/{print $2}') GiB."
  echo "Servers pinned to CPU 0 with one request thread, load generator on CPU 1, $ROUNDS alternating rounds, medians;"
  echo "hnswlib and lyre-vector (Lyre's graph without the server) in process on CPU 0, one thread, queries one at a"
  echo "time. Same dataset ($CLUSTERS clusters, seeded) and"
  echo "declaration (L2, M 16, efConstruction 100) everywhere."
  echo
  echo '```'
  cat "$OUT/vector.txt"
  echo '```'
  echo
  echo "The HTTP stack's bound for the same queries: bare hyper parsing each QUERY body and answering ten fixed ids"
  echo "(it searches nothing; its recall is 0):"
  echo
  echo '```'
  cat "$OUT/ceiling.txt"
  echo '```'
  echo
  echo "![queries/s against recall@10]($NAME.png)"
} >"$ROOT/bench/results/$NAME.md"
echo "wrote bench/results/$NAME.md"
