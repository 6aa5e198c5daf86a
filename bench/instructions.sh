#!/usr/bin/env bash
# Instructions per request, counted by valgrind's callgrind (Debian's valgrind):
# unlike time, the count does not move with what else the machine is doing, so a
# change of a few percent shows between two builds in one run. Kernel work (the
# TCP send and receive, a third or more of a request's CPU) is not counted.
#
# Each build serves the JavaScript benchmark's component (bench/javascript.sh) under
# callgrind on CPU 0; `wrk -t1 -c4` on CPU 1 warms it for 3 s, the counters are
# zeroed, then SECONDS_EACH (default 6) more seconds of one workload are counted:
#
#   class     GET /DogView/d1   a table's class whose get calls super.get(target)
#   endpoint  GET /Hello        a Resource returning a small JSON object
#   plain     GET /Dog/d1       the table's own REST GET (no JavaScript)
#   ycsb      GET /usertable/<one of 2,000 keys at random>, records of ten 100-byte
#             fields (bench/hot-path.sh's read, with its application)
#   counters  PATCH /counter/c0 {"hits": {"__op__": "add", "value": 1}} with
#             storage.writeAsync (hot-path.sh's WORKLOAD=counters)
#
# Printed per build and workload: the requests counted, the instructions per request
# of every thread that ran more than a million, and their sum.
#
#   bench/instructions.sh                          # this tree's release build
#   bench/instructions.sh /tmp/lyre-before target/release/lyre
#   WORKLOADS="class" bench/instructions.sh
#   KEEP=1 WORKLOADS=ycsb bench/instructions.sh   # keeps the callgrind files (callgrind_annotate)
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
SECONDS_EACH=${SECONDS_EACH:-6}
WORKLOADS=${WORKLOADS:-class endpoint plain}
WORK=$(mktemp -d /tmp/lyre-instructions.XXXXXX)

source "$ROOT/bench/lib.sh"
command -v valgrind >/dev/null || { echo "valgrind is needed: apt-get install valgrind" >&2; exit 1; }
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
eval "$(sed -n '/^write_app()/,/^JS$/p' "$ROOT/bench/javascript.sh"; echo '}')"
if [ $# -eq 0 ]; then
  (cd "$ROOT" && cargo build --release --locked -p lyre-server)
  set -- "$LYRE"
fi

AUTH='Authorization: Basic YWRtaW46cGFzc3dvcmQ='
printf '%-28s %-9s %9s %12s  %s\n' build workload requests "instr/req" "by thread"
number=0
for build in "$@"; do
  number=$((number + 1))
  for workload in $WORKLOADS; do
    case $workload in
      class) path=/DogView/d1 ;;
      endpoint) path=/Hello ;;
      plain) path=/Dog/d1 ;;
      ycsb | counters) path="" ;;
      *) echo "WORKLOADS are class, endpoint, plain, ycsb and counters" >&2; exit 2 ;;
    esac
    # Numbered: two builds may have the same file name.
    run=$WORK/$number-$workload
    mkdir -p "$run"
    if [ -n "$path" ]; then write_app "$run/lyre-app/root"; fi
    # Callgrind cannot map LMDB's default 256 GiB per database: 1 GiB is plenty here.
    cat >"$run/valgrind.sh" <<WRAP
#!/bin/sh
STORAGE_MAXDATABASESIZE=1073741824 exec valgrind --tool=callgrind --separate-threads=yes \
  --callgrind-out-file=$run/callgrind.%p "$(realpath "$build")" "\$@"
WRAP
    chmod +x "$run/valgrind.sh"
    if [ -n "$path" ]; then
      WORK=$run start_lyre app "" "$run/valgrind.sh"
      records=$(seq 0 199 | awk '{printf "%s{\"id\":\"d%d\",\"name\":\"Dog %d\",\"breed\":\"breed %d\",\"age\":%d}", (NR > 1 ? "," : ""), $1, $1, $1 % 50, $1 % 15}')
      echo "{\"operation\":\"upsert\",\"table\":\"Dog\",\"records\":[$records]}" |
        curl -fsS -u admin:password -H 'content-type: application/json' "http://127.0.0.1:$LYRE_PORT" --data-binary @- >/dev/null
      load=(-H "$AUTH" "http://127.0.0.1:$LYRE_REST$path")
    else
      # The YCSB application and 2,000 of its records; the counters with writeAsync.
      ASYNC=$([ "$workload" = counters ] && echo true || echo false) WORK=$run start_lyre app ycsb "$run/valgrind.sh"
      taskset -c 1 "$BENCH" ycsb load --records 2000 --rounds 1 --settle 0 \
        --url "http://127.0.0.1:$LYRE_PORT" --rest "http://127.0.0.1:$LYRE_REST" >/dev/null
      {
        echo 'local paths = {'
        "$BENCH" ycsb-paths --records 2000 | sed 's/.*/"&",/'
        echo '}'
        echo "wrk.headers[\"Authorization\"] = \"${AUTH#Authorization: }\""
        echo 'wrk.headers["Content-Type"] = "application/json"'
        echo 'local increment = '"'"'{"hits":{"__op__":"add","value":1}}'"'"
        case $workload in
          ycsb) echo 'request = function() return wrk.format("GET", paths[math.random(#paths)]) end' ;;
          counters) echo 'request = function() return wrk.format("PATCH", "/counter/c0", nil, increment) end' ;;
        esac
      } >"$run/requests.lua"
      load=(-s "$run/requests.lua" "http://127.0.0.1:$LYRE_REST")
    fi
    taskset -c 1 wrk -t1 -c4 -d3s "${load[@]}" >/dev/null
    callgrind_control -z "$LYRE_PID" >/dev/null
    taskset -c 1 wrk -t1 -c4 -d"${SECONDS_EACH}s" "${load[@]}" >"$run/wrk.txt"
    grep -q Non-2xx "$run/wrk.txt" && { echo "$workload: some answers were not 2xx" >&2; exit 1; }
    callgrind_control -d "$LYRE_PID" >/dev/null
    kill -TERM -- -"$LYRE_PID" 2>/dev/null || true
    wait "$LYRE_PID" 2>/dev/null || true
    requests=$(awk '/requests in/ {print $1}' "$run/wrk.txt")
    # The dump taken after zeroing is each thread's file with part 1 (`.1-NN`).
    threads=$(for f in "$run"/callgrind.*.1-*; do
      total=$(awk '/^(summary|totals):/ {print $2; exit}' "$f")
      if [ -n "$total" ] && [ "$total" -gt 1000000 ]; then echo "${f##*-} $total"; fi
    done)
    echo "$threads" | awk -v build="$number:$(basename "$build")" -v workload="$workload" -v n="$requests" '
      NF == 2 { sum += $2; parts = parts sprintf(" thread %s: %.0f", $1, $2 / n) }
      END { printf "%-28s %-9s %9d %12.0f %s\n", build, workload, n, sum / n, parts }'
  done
done
