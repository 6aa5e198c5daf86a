#!/usr/bin/env bash
# The differential test against Harper 5 (built from source by ../shared/tools/harper5.sh):
# starts Lyre and Harper 5 on fresh roots with the `diff` application, sends both the
# same seeded request sequences (`lyre-bench diff`), and writes the agreement report to
# bench/results/<date>-diff-harper5.md. Never part of `cargo test`.
#
#   HARPER_MIRROR=<git dir of HarperFast/harper> bench/diff-harper5.sh
#   SEEDS="1 2 3" REQUESTS=3000 bench/diff-harper5.sh
#   REPRODUCTIONS=1000 DIFFERENCES=/tmp/d bench/diff-harper5.sh   # every difference, whole, as JSON in /tmp/d,
#                                                                 # and every request with both answers (trace-<seed>.jsonl)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
HARPER5=${HARPER5:-$ROOT/../shared/tools/harper5.sh}
SEEDS=${SEEDS:-"1 2 3"}
REQUESTS=${REQUESTS:-2000}
REPRODUCTIONS=${REPRODUCTIONS:-4}
DIFFERENCES=${DIFFERENCES:-}
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/bench/results/$DATE-diff-harper5.md
WORK=$(mktemp -d /tmp/lyre-diff.XXXXXX)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/lyre-target}
# LYRE=<binary> compares another build of Lyre (an older one, for a before figure).
LYRE_GIVEN=${LYRE:-}
LYRE=${LYRE:-$CARGO_TARGET_DIR/release/lyre}
BENCH=$CARGO_TARGET_DIR/release/lyre-bench

source "$ROOT/bench/lib.sh"

start_harper() {
  local root=$WORK/harper-$1
  mkdir -p "$root"
  # The first run installs; the application is picked up on the next start.
  setsid "$HARPER5" run "$root" 9995 9996 1895 >"$root.log" 2>&1 &
  local pid=$!
  wait_health 9995
  kill -TERM -- "-$pid"
  while curl -fs -m 1 http://127.0.0.1:9995/health >/dev/null 2>&1; do sleep 0.2; done
  sleep 1
  install_app "$root" diff
  setsid "$HARPER5" run "$root" 9995 9996 1895 >>"$root.log" 2>&1 &
  PIDS+=("$!")
  wait_health 9995
}

start_lyre() {
  local root=$WORK/lyre-$1
  install_app "$root" diff
  setsid env HDB_ADMIN_USERNAME=admin HDB_ADMIN_PASSWORD=password OPERATIONSAPI_NETWORK_PORT=9985 HTTP_PORT=9986 \
    LOGGING_LEVEL=warn "$LYRE" run --root "$root" >"$root.log" 2>&1 &
  PIDS+=("$!")
  wait_health 9985
}

(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
[ -n "${HARPER_MIRROR:-}" ] && "$HARPER5" setup
{
  echo "# Differential test against Harper 5 — $DATE"
  echo
  if [ -n "$LYRE_GIVEN" ]; then echo "Lyre: the binary $LYRE_GIVEN."; else echo "Lyre at $(cd "$ROOT" && git rev-parse --short HEAD)."; fi
  echo "Harper 5 built from source by \`../shared/tools/harper5.sh\`."
  echo "\`bench/diff-harper5.sh\` with SEEDS=\"$SEEDS\" REQUESTS=$REQUESTS; allow-list: \`bench/diff-allowed.json\`."
  echo
} >"$OUT"
for seed in $SEEDS; do
  start_harper "$seed"
  start_lyre "$seed"
  echo "## Seed $seed" >>"$OUT"
  echo >>"$OUT"
  dump=()
  [ -n "$DIFFERENCES" ] && mkdir -p "$DIFFERENCES" && dump=(--differences "$DIFFERENCES/seed-$seed.json" --trace "$DIFFERENCES/trace-$seed.jsonl")
  "$BENCH" diff --seed "$seed" --requests "$REQUESTS" --allowed "$ROOT/bench/diff-allowed.json" \
    --reproductions "$REPRODUCTIONS" "${dump[@]}" \
    --url http://127.0.0.1:9985 --rest http://127.0.0.1:9986 \
    --compare-url http://127.0.0.1:9995 --compare-rest http://127.0.0.1:9996 | tee -a "$OUT"
  echo >>"$OUT"
  cleanup
done
echo "report: $OUT"
