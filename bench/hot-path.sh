#!/usr/bin/env bash
# The REST hot path (reads, and with WORKLOAD writes) measured with an outside load
# generator: `wrk` (Debian's), pinned to CPU 1, against servers each pinned to CPU 0
# with one request thread:
#
#   ceiling  bare hyper answering a fixed record to a GET, 204 to a write once its body
#            is read (`lyre-bench ceiling`): the HTTP stack's own bound
#   lookup   (reads only) bare hyper answering each record from an LMDB environment of
#            its own (`lyre-bench ceiling --lookup`): the HTTP stack plus LMDB's lookup
#   lyre     this tree's release build
#   old      another Lyre build, when OLD=<binary> is set (before/after, same run)
#   harper   Harper 4.7.29, when HARPER=1 (installed under ~/.cache/lyre-bench on first use)
#   harper5  Harper 5 built from source (../shared/tools/harper5.sh setup), when HARPER=5;
#            HARPER="1 5" runs both
#
# Every server holds the same RECORDS (default 20,000) YCSB records (ten 100-byte
# fields); wrk asks `GET /usertable/<random key>` with Basic auth, 32 connections, for
# DURATION seconds (default 8) per round, ROUNDS (default 5) rounds alternating between the
# servers. Reported per server: requests/s, p50, p99 and the server's CPU time per
# request (from /proc), medians (min–max), and each median's ratio to the ceiling.
#
# WORKLOAD=put replaces a random record with `PUT /usertable/<random key>` (a new
# ten-field body, one of 64 made at start); WORKLOAD=mix is YCSB A's half reads, half
# PUTs; WORKLOAD=counters increments one hot counter (`PATCH /counter/c0` with
# `{"hits": {"__op__": "add", "value": 1}}`). For writes the ceiling reads each body
# and answers 204, storing nothing: the least any server spends on them. Ratios are
# to each Harper that ran (the targets are stated against it), with the ceiling in
# the same table. DURABILITY=async sets storage.writeAsync on Lyre and Harper (like
# for like: neither flushes at commit).
#
#   bench/hot-path.sh
#   OLD=/tmp/lyre-before HARPER=1 ROUNDS=7 bench/hot-path.sh
#   THREADS=0 bench/hot-path.sh            # Lyre's default thread count, still on one core
#   WORKLOAD=mix DURABILITY=async HARPER=1 bench/hot-path.sh
# Writes bench/results/<date>-hot-path.md (<date>-hot-path-<workload>.md for writes;
# REPORT overrides).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROUND=${DURATION:-8}
RECORDS=${RECORDS:-20000}
WORKLOAD=${WORKLOAD:-get}
case $WORKLOAD in
  get) SUFFIX="" ;;
  put | mix | counters) SUFFIX="-$WORKLOAD" ;;
  *) echo "WORKLOAD is get, put, mix or counters" >&2; exit 2 ;;
esac
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-hot-path$SUFFIX.md}
WORK=$(mktemp -d /tmp/lyre-hot.XXXXXX)
case ${DURABILITY:-default} in
  default) ASYNC=false ;;
  async) ASYNC=true ;;
  *) echo "DURABILITY is default or async" >&2; exit 2 ;;
esac

source "$ROOT/bench/lib.sh"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }

(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)

# The Lua script: every key of the dataset, one picked at random per request.
{
  echo 'local paths = {'
  "$BENCH" ycsb-paths --records "$RECORDS" | sed 's/.*/"&",/'
  echo '}'
  cat <<'LUA'
wrk.headers["Authorization"] = "Basic YWRtaW46cGFzc3dvcmQ="
wrk.headers["Content-Type"] = "application/json"
local function field()
  local letters = {}
  for i = 1, 100 do letters[i] = string.char(97 + math.random(0, 25)) end
  return table.concat(letters)
end
local bodies = {}
for b = 1, 64 do
  local fields = {}
  for f = 0, 9 do fields[#fields + 1] = '"field' .. f .. '":"' .. field() .. '"' end
  bodies[b] = "{" .. table.concat(fields, ",") .. "}"
end
local function get() return wrk.format("GET", paths[math.random(#paths)]) end
local function put() return wrk.format("PUT", paths[math.random(#paths)], nil, bodies[math.random(#bodies)]) end
local increment = '{"hits":{"__op__":"add","value":1}}'
local function count() return wrk.format("PATCH", "/counter/c0", nil, increment) end
LUA
  case $WORKLOAD in
    get) echo 'request = get' ;;
    put) echo 'request = put' ;;
    mix) echo 'request = function() if math.random() < 0.5 then return get() else return put() end end' ;;
    counters) echo 'request = count' ;;
  esac
} >"$WORK/requests.lua"

# name → "pid rest-port"
declare -A SERVERS
load() { taskset -c 1 "$BENCH" ycsb load --records "$RECORDS" --rounds 1 --settle 0 --url "$1" --rest "$2" >/dev/null; }

setsid taskset -c 0 "$BENCH" ceiling --port 9950 >/dev/null 2>&1 &
PIDS+=("$!")
SERVERS[ceiling]="$! 9950"
wait_health 9950
ORDER=(ceiling)
if [ "$WORKLOAD" = get ]; then
  setsid taskset -c 0 "$BENCH" ceiling --port 9951 --lookup "$RECORDS" >/dev/null 2>&1 &
  PIDS+=("$!")
  SERVERS[lookup]="$! 9951"
  wait_health 9951
  ORDER+=(lookup)
fi

start_lyre hot ycsb
SERVERS[lyre]="$LYRE_PID $LYRE_REST"
load "http://127.0.0.1:$LYRE_PORT" "http://127.0.0.1:$LYRE_REST"
if [ -n "${OLD:-}" ]; then
  start_lyre hot-old ycsb "$OLD" 9937 9938
  SERVERS[old]="$LYRE_PID 9938"
  load http://127.0.0.1:9937 http://127.0.0.1:9938
fi
# Which Harpers run: HARPER=1 (4.7.29), 5, or "1 5".
has_harper() { [[ " ${HARPER:-} " == *" $1 "* ]]; }
if has_harper 1; then
  install_harper
  start_harper hot ycsb
  SERVERS[harper]="$(pgrep -n -f "harperdb run" || echo "$HARPER_PID") 9926"
  load http://127.0.0.1:9925 http://127.0.0.1:9926
fi
if has_harper 5; then
  ycsb_app() { install_app "$1" ycsb harper; }
  start_harper5 hot ycsb_app
  SERVERS[harper5]="$HARPER_PID $H5_REST"
  load "http://127.0.0.1:$H5_OPS" "http://127.0.0.1:$H5_REST"
fi
ORDER+=(lyre)
[ -n "${OLD:-}" ] && ORDER+=(old)
has_harper 1 && ORDER+=(harper)
has_harper 5 && ORDER+=(harper5)
sleep 5

: >"$WORK/rounds.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for name in "${ORDER[@]}"; do
    read -r pid port <<<"${SERVERS[$name]}"
    wrk_round "$round" "$name" "$pid" "$port" "$WORK/requests.lua"
  done
done

case $WORKLOAD in
  get) WHAT="\`GET /usertable/<random key>\`" ;;
  put) WHAT="\`PUT /usertable/<random key>\` (a whole new record)" ;;
  mix) WHAT="half \`GET\`, half \`PUT /usertable/<random key>\` (YCSB A's mix)" ;;
  counters) WHAT="\`PATCH /counter/c0\` incrementing one hot counter" ;;
esac
{
  echo "# REST hot path ($WORKLOAD) — $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared. Each server on CPU 0"
  echo "with one request thread (Lyre THREADS_COUNT=${THREADS:-1}), \`wrk -t1 -c32 -d${SECONDS_PER_ROUND}s\` on CPU 1, $RECORDS records,"
  echo "$WHAT with Basic auth, storage.writeAsync=$ASYNC, $ROUNDS alternating rounds. Medians (min–max); CPU is the"
  echo "server's user + system time per request. Ratios: the server's median over the ceiling's and over each Harper's"
  echo "(when it ran); p99 ratios are the ceiling's p99 over the server's (so 1.0 is the ceiling's latency). Core busy is"
  echo "requests/s times CPU per request: the share of its core the server used. Well below 1.0, \`wrk\` set the pace,"
  echo "not the server, and requests/s understates what the server could do."
  echo
  echo "| server | requests/s | of ceiling | of Harper 4.7 | of Harper 5 | p50 µs | p99 µs | p99 vs ceiling | CPU µs/request | core busy | non-2xx |"
  echo "|---|---|---|---|---|---|---|---|---|---|---|"
  awk -F'\t' "$ROUND_STATS"'
    { rps[$2] = rps[$2] " " $3; p50[$2] = p50[$2] " " $4; p99[$2] = p99[$2] " " $5; cpu[$2] = cpu[$2] " " $6; err[$2] += $7
      busy[$2] = busy[$2] " " ($3 * $6 / 1e6)
      if (!($2 in seen)) { seen[$2] = 1; order[++count] = $2 } }
    END {
      base = median(rps["ceiling"]); base99 = median(p99["ceiling"])
      harper = ("harper" in seen) ? median(rps["harper"]) : 0
      harper5 = ("harper5" in seen) ? median(rps["harper5"]) : 0
      for (k = 1; k <= count; k++) {
        s = order[k]; m = median(rps[s]); q = median(p99[s])
        versus = harper ? sprintf("%.2f", m / harper) : "–"
        versus5 = harper5 ? sprintf("%.2f", m / harper5) : "–"
        printf "| %s | %.0f (%s) | %.2f | %s | %s | %.0f | %.0f (%s) | %.2f | %.2f | %.2f | %d |\n", s, m, span(rps[s]), m / base, versus, versus5, median(p50[s]), q, span(p99[s]), base99 / q, median(cpu[s]), median(busy[s]), err[s]
      }
    }' "$WORK/rounds.tsv"
  echo
  echo "Per round (round, server, requests/s, p50 µs, p99 µs, CPU µs/request, non-2xx):"
  echo
  echo '```'
  cat "$WORK/rounds.tsv"
  echo '```'
} >"$REPORT"
cat "$REPORT"
