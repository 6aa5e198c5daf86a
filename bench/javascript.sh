#!/usr/bin/env bash
# The JavaScript layer, Lyre against Harper 5 (built from source by
# ../shared/tools/harper5.sh) on the same resources.js: each server alone on CPU 0
# with one request thread (Lyre: one JavaScript worker), `wrk -t1 -c32` on CPU 1,
# the other server stopped (SIGSTOP) for the round:
#
#   plain     GET /Dog/<random id>        the table's own REST GET (no JavaScript)
#   class     GET /DogView/<random id>    a table's class whose get calls super.get(target)
#   endpoint  GET /Hello                  a Resource returning a small JSON object
#
# With Basic auth, over RECORDS (default 10,000) records, for DURATION seconds
# (default 8) per round, ROUNDS (default 5) rounds alternating. Reported: requests/s,
# p50, p99 and the server's CPU per request (from /proc), medians (min–max); Lyre's
# ratio to Harper 5 for each (of the medians, and the median of each round's own
# ratio), and the cost of the JavaScript layer (Lyre's class over its plain GET).
# The target is 3× Harper.
#
#   bench/javascript.sh
# Writes bench/results/<date>-javascript.md (REPORT overrides). LYRE_ONLY=1 measures
# Lyre alone and writes no report (for trying a change quickly; the ratio needs Harper).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROUND=${DURATION:-8}
RECORDS=${RECORDS:-10000}
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-javascript.md}
WORK=$(mktemp -d /tmp/lyre-javascript.XXXXXX)

source "$ROOT/bench/lib.sh"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
LYRE_ONLY=${LYRE_ONLY:-}
[ -n "$LYRE_ONLY" ] || [ -d "$HOME/.cache/harper5/src" ] ||
  { echo "Harper 5 is needed: HARPER_MIRROR=<git dir> $HARPER5 setup" >&2; exit 1; }
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)

# The same component for both servers.
write_app() {
  local app=$1/components/kennel
  mkdir -p "$app"
  printf "rest: true\ngraphqlSchema:\n  files: '*.graphql'\njsResource:\n  files: resources.js\n" >"$app/config.yaml"
  cat >"$app/schema.graphql" <<'GRAPHQL'
type Dog @table @export {
  id: ID @primaryKey
  name: String
  breed: String
  age: Int
}
GRAPHQL
  cat >"$app/resources.js" <<'JS'
export class DogView extends tables.Dog {
	static loadAsInstance = false;
	async get(target) {
		return super.get(target);
	}
}

export class Hello extends Resource {
	static loadAsInstance = false;
	get() {
		return { hello: 'world', served: true };
	}
}
JS
}

H_OPS=$H5_OPS
H_REST=$H5_REST

write_app "$WORK/lyre-javascript/root"
start_lyre javascript
[ -n "$LYRE_ONLY" ] || start_harper5 javascript write_app

AUTH="admin:password"
records=$(seq 0 $((RECORDS - 1)) | awk '{printf "%s{\"id\":\"d%d\",\"name\":\"Dog %d\",\"breed\":\"breed %d\",\"age\":%d}", (NR > 1 ? "," : ""), $1, $1, $1 % 50, $1 % 15}')
OPS_PORTS=("$LYRE_PORT")
[ -n "$LYRE_ONLY" ] || OPS_PORTS+=("$H_OPS")
for ops in "${OPS_PORTS[@]}"; do
  echo "{\"operation\":\"upsert\",\"table\":\"Dog\",\"records\":[$records]}" |
    curl -fsS -u "$AUTH" -H 'content-type: application/json' "http://127.0.0.1:$ops" --data-binary @- >/dev/null
done

for workload in plain class endpoint; do
  case $workload in
    plain) path='"/Dog/d" .. math.random(0, records - 1)' ;;
    class) path='"/DogView/d" .. math.random(0, records - 1)' ;;
    endpoint) path='"/Hello"' ;;
  esac
  cat >"$WORK/$workload.lua" <<LUA
wrk.headers["Authorization"] = "Basic YWRtaW46cGFzc3dvcmQ="
local records = $RECORDS
request = function()
  return wrk.format("GET", $path)
end
LUA
done

if [ -n "$LYRE_ONLY" ]; then
  for round in $(seq 1 "$ROUNDS"); do
    for workload in plain class endpoint; do
      wrk_round "$round" "lyre-$workload" "$LYRE_PID" "$LYRE_REST" "$WORK/$workload.lua"
    done
  done
  exit 0
fi

# Both servers answer the same before anything is measured.
for path in /Dog/d7 /DogView/d7 /Hello; do
  lyre=$(curl -fsS -u "$AUTH" "http://127.0.0.1:$LYRE_REST$path")
  harper=$(curl -fsS -u "$AUTH" "http://127.0.0.1:$H_REST$path")
  echo "$path: Lyre $lyre / Harper 5 $harper"
  [ "$(echo "$lyre" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))')" = \
    "$(echo "$harper" | python3 -c 'import json,sys; print(json.dumps(json.load(sys.stdin), sort_keys=True))')" ] ||
    { echo "the answers differ" >&2; exit 1; }
done

: >"$WORK/rounds.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for workload in plain class endpoint; do
    PAUSED=$HARPER_PID wrk_round "$round" "lyre-$workload" "$LYRE_PID" "$LYRE_REST" "$WORK/$workload.lua"
    PAUSED=$LYRE_PID wrk_round "$round" "harper5-$workload" "$HARPER_PID" "$H_REST" "$WORK/$workload.lua"
  done
done

{
  echo "# JavaScript resources, Lyre against Harper 5 — $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared. Each server on CPU 0"
  echo "with one request thread (Lyre: one JavaScript worker; Harper 5: THREADS_COUNT=1), \`wrk -t1 -c32 -d${SECONDS_PER_ROUND}s\`"
  echo "on CPU 1 (the other server stopped for the round), $RECORDS records, Basic auth, $ROUNDS alternating rounds."
  echo "Medians (min–max); CPU is the server's user +"
  echo "system time per request (Harper 5's whole process tree's main process)."
  echo
  echo "| workload | requests/s | p50 µs | p99 µs | CPU µs/request | non-2xx |"
  echo "|---|---|---|---|---|---|"
  awk -F'\t' "$ROUND_STATS"'
    { rps[$2] = rps[$2] " " $3; p50[$2] = p50[$2] " " $4; p99[$2] = p99[$2] " " $5; cpu[$2] = cpu[$2] " " $6; err[$2] += $7
      round_rps[$1 "," $2] = $3; rounds[$1] = 1 }
    END {
      split("lyre-plain harper5-plain lyre-class harper5-class lyre-endpoint harper5-endpoint", names, " ")
      for (k = 1; k <= 6; k++) {
        s = names[k]
        printf "| %s | %.0f (%s) | %.0f | %.0f | %.2f | %d |\n", s, median(rps[s]), span(rps[s]), median(p50[s]), median(p99[s]), median(cpu[s]), err[s]
      }
      printf "\nLyre / Harper 5 (requests/s): plain %.2f×, class %.2f×, endpoint %.2f× (target: 3×)\n", median(rps["lyre-plain"]) / median(rps["harper5-plain"]), median(rps["lyre-class"]) / median(rps["harper5-class"]), median(rps["lyre-endpoint"]) / median(rps["harper5-endpoint"])
      # Each round runs the two servers seconds apart, so the ratio within a round
      # leaves out what the load of the machine did between rounds.
      for (w = 1; w <= 3; w++) {
        split("plain class endpoint", workloads, " ")
        per_round[w] = ""
        for (r in rounds) per_round[w] = per_round[w] " " round_rps[r ",lyre-" workloads[w]] / round_rps[r ",harper5-" workloads[w]]
      }
      printf "Median of the per-round ratios: plain %.2f×, class %.2f×, endpoint %.2f×\n", median(per_round[1]), median(per_round[2]), median(per_round[3])
      printf "The JavaScript layer in Lyre: the class answers %.2f× as many requests/s as the plain GET, at %.2f µs more CPU each\n", median(rps["lyre-class"]) / median(rps["lyre-plain"]), median(cpu["lyre-class"]) - median(cpu["lyre-plain"])
    }' "$WORK/rounds.tsv"
  echo
  echo "Per round (round, workload, requests/s, p50 µs, p99 µs, CPU µs/request, non-2xx):"
  echo
  echo '```'
  cat "$WORK/rounds.tsv"
  echo '```'
} >"$REPORT"
cat "$REPORT"
