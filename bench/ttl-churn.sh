#!/usr/bin/env bash
# TTL churn: Lyre and Harper 4.7.29 side by side (both on CPU 0, the writer on CPU 1),
# each taking WRITES records at RATE per second into a table whose records expire
# and are evicted 10 s after their write, while the size of each server's
# `database` directory is sampled. Results: bench/results/<date>-ttl-churn.{txt,json,png}.
#
#   bench/ttl-churn.sh
#   WRITES=200000 RATE=5000 bench/ttl-churn.sh
#   LOGGING_AUDITRETENTION=60s bench/ttl-churn.sh   # both servers keep a minute of log
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
WRITES=${WRITES:-1000000}
RATE=${RATE:-5000}
TAIL=${TAIL:-60}
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/bench/results/$DATE-ttl-churn${SUFFIX:-}
WORK=$(mktemp -d /tmp/lyre-churn.XXXXXX)
ASYNC=false
export LOGGING_AUDITRETENTION=${LOGGING_AUDITRETENTION:-3d}

source "$ROOT/bench/lib.sh"

(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
install_harper
start_harper churn cache
start_lyre churn cache
taskset -c 1 "$BENCH" ttl-churn --writes "$WRITES" --rate "$RATE" --tail "$TAIL" \
  --name lyre --url "http://127.0.0.1:$LYRE_PORT" --rest "http://127.0.0.1:$LYRE_REST" --data "$WORK/lyre-churn/root/database" \
  --compare-name harper --compare-url http://127.0.0.1:9925 --compare-rest http://127.0.0.1:9926 \
  --compare-data "$WORK/harper-churn/root/database" \
  --json "$OUT.json" --chart "$OUT.png" | tee "$OUT.txt"
echo "audit log retention: $LOGGING_AUDITRETENTION" | tee -a "$OUT.txt"
