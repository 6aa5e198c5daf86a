#!/usr/bin/env bash
# Memory taken by large request bodies, and how long they hold their database's
# writer: each build alone, one body at a time (and four at once), the server's peak
# anonymous memory (RssAnon, sampled every 20 ms) above its idle size, the answer, and
# the slowest of the small inserts another client sends to the same database every
# 100 ms meanwhile.
#
#   bench/request-memory.sh                      # this build only
#   bench/request-memory.sh OLD_LYRE_BINARY      # and a reference build, side by side
#   RUNS=3 bench/request-memory.sh old/lyre
#   SCENARIOS="wide tiny-2m" REPORT=/tmp/r.md bench/request-memory.sh old/lyre
#
# Results: bench/results/<date>-request-memory.md (or $REPORT).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
RUNS=${RUNS:-3}
DATE=$(date -u +%Y-%m-%d)
REPORT=${REPORT:-$ROOT/bench/results/$DATE-request-memory.md}
SCENARIOS=${SCENARIOS:-"wide tiny-2m tiny-7m four-wide"}
WORK=$(mktemp -d /tmp/lyre-memory.XXXXXX)
export CARGO_TARGET_DIR=${CARGO_TARGET_DIR:-$HOME/.cache/lyre-target}
NEW=$CARGO_TARGET_DIR/release/lyre
OLD=${1:+$(realpath "$1")}
OPS=http://127.0.0.1:9955
BENCH=/bin/false # lib.sh's install_app is not used here

source "$ROOT/bench/lib.sh"

(cd "$ROOT" && cargo build --release --locked -p lyre-server)

# The bodies: insert operations into table `t`, written once.
python3 - "$WORK" "$SCENARIOS" <<'EOF'
import json, sys
work, wanted = sys.argv[1], sys.argv[2].replace("four-wide", "wide").split()
def write(name, n, record):
    if name not in wanted:
        return
    with open(f"{work}/{name}.json", "w") as out:
        out.write('{"operation":"insert","database":"data","table":"t","records":[')
        for i in range(n):
            if i:
                out.write(',')
            out.write(json.dumps(record(i), separators=(',', ':')))
        out.write(']}')
write("wide", 150_000, lambda i: {"id": i, **{f"f{j}": "x" * 50 for j in range(10)}})
write("tiny-2m", 2_000_000, lambda i: {"id": i})
write("tiny-7m", 7_000_000, lambda i: {"id": i})
EOF

op() { curl -fsS -u admin:password "$OPS" -H 'content-type: application/json' -d "$1" >/dev/null; }

# Starts binary $1 with extra environment $2 on a fresh root; sets PID.
start() {
  rm -rf "$WORK/root"
  # shellcheck disable=SC2086
  setsid env $2 HDB_ADMIN_USERNAME=admin HDB_ADMIN_PASSWORD=password OPERATIONSAPI_NETWORK_PORT=9955 \
    HTTP_PORT=9956 LOGGING_LEVEL=warn "$1" run --root "$WORK/root" >"$WORK/lyre.log" 2>&1 &
  PID=$!
  PIDS+=("$PID")
  wait_health 9955
  for t in t t1 t2 t3 t4 small; do
    op "{\"operation\":\"create_table\",\"database\":\"data\",\"table\":\"$t\",\"primary_key\":\"id\"}"
  done
}

# Samples the server's RssAnon (kB) into $WORK/peak until it exits.
sample() {
  (peak=0; while kill -0 "$PID" 2>/dev/null; do
    r=$(awk '/RssAnon/{print $2}' "/proc/$PID/status" 2>/dev/null || echo 0)
    if [ "${r:-0}" -gt "$peak" ]; then peak=$r; echo "$peak" >"$WORK/peak"; fi
    sleep 0.02
  done) &
}

# One run of scenario $2 against binary $1: prints "status secs peak_MB small_max_ms".
run() {
  local binary=$1 scenario=$2 env="" bodies=() started
  case $scenario in
    four-wide) env="HTTP_REQUESTMEMORY=1610612736"; bodies=(t1 t2 t3 t4) ;;
    # Above the default per-request cap (2 GiB), so its memory is measured too.
    tiny-2m) env="HTTP_MAXREQUESTMEMORY=4294967296"; bodies=(t) ;;
    *) bodies=(t) ;;
  esac
  start "$binary" "$env"
  local idle
  idle=$(awk '/RssAnon/{print $2}' "/proc/$PID/status")
  echo "$idle" >"$WORK/peak"
  sample
  local body=$scenario
  [ "$scenario" = four-wide ] && body=wide
  started=$(date +%s.%N)
  local clients=()
  for t in "${bodies[@]}"; do
    sed "s/\"table\":\"t\"/\"table\":\"$t\"/" "$WORK/$body.json" >"$WORK/body-$t.json"
  done
  for t in "${bodies[@]}"; do
    curl -s -o "$WORK/out-$t" -w "%{http_code}\n" -u admin:password "$OPS" -H 'content-type: application/json' \
      --data-binary "@$WORK/body-$t.json" >"$WORK/status-$t" &
    clients+=("$!")
  done
  : >"$WORK/small"
  while kill -0 "${clients[@]}" 2>/dev/null; do
    curl -s -o /dev/null -w "%{time_total}\n" -u admin:password "$OPS" -H 'content-type: application/json' \
      -d '{"operation":"insert","database":"data","table":"small","records":[{"x":1}]}' >>"$WORK/small"
    sleep 0.1
  done
  wait "${clients[@]}" || true
  local secs statuses peak small
  secs=$(echo "$(date +%s.%N) - $started" | bc)
  statuses=$(cat "$WORK"/status-* | sort | uniq -c | awk '{printf "%s%s×%s", (NR>1?",":""), $1, $2}')
  sleep 0.1
  peak=$(( ($(cat "$WORK/peak") - idle) / 1024 ))
  small=$(sort -n "$WORK/small" | tail -1 | awk '{printf "%d", $1 * 1000}')
  cleanup
  rm -f "$WORK"/status-* "$WORK"/out-* "$WORK"/body-*
  printf '%s %.1f %s %s\n' "$statuses" "$secs" "$peak" "${small:-0}"
}

median() { sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }

{
  echo "# Request memory: $DATE"
  echo
  echo "Each build alone, $RUNS runs per row (medians; answers as count×status). Peak = the server's"
  echo "RssAnon above its idle size while the bodies are read, decoded and written. Writer stall ="
  echo "the slowest small insert into the same database, sent every 100 ms meanwhile."
  echo "Bodies: wide = 150,000 records of 10 × 50-byte strings (92 MB of JSON);"
  echo "tiny = {\"id\": n} records (2M: 26 MB, sent with http.maxRequestMemory = 4 GiB, above the"
  echo "2 GiB default; 7M: 104 MB, defaults); four-wide = four wide bodies at once into four tables,"
  echo "with http.requestMemory = 1.5 GiB."
  echo
  echo "| build | body | answer | seconds | peak MB | writer stall ms |"
  echo "|---|---|---|---|---|---|"
} >"$REPORT"

builds=("new:$NEW")
[ -n "$OLD" ] && builds=("old:$OLD" "new:$NEW")
for scenario in $SCENARIOS; do
  for build in "${builds[@]}"; do
    name=${build%%:*} binary=${build#*:}
    : >"$WORK/runs"
    for _ in $(seq "$RUNS"); do run "$binary" "$scenario" >>"$WORK/runs"; done
    answer=$(awk '{print $1}' "$WORK/runs" | sort | uniq -c | sort -rn | head -1 | awk '{print $2}')
    secs=$(awk '{print $2}' "$WORK/runs" | median)
    peak=$(awk '{print $3}' "$WORK/runs" | median)
    stall=$(awk '{print $4}' "$WORK/runs" | median)
    echo "| $name | $scenario | $answer | $secs | $peak | $stall |" | tee -a "$REPORT"
  done
done
echo "report: $REPORT"
