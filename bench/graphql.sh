#!/usr/bin/env bash
# A GraphQL query with one relationship level against the equivalent REST query, on
# one Lyre server (pinned to CPU 0, one request thread) with `wrk -t1 -c32` on CPU 1:
#
#   rest     GET /Product/?id==<random>&select(name,price,brand{name})
#   graphql  POST /graphql {"query": "query P($id: ID) { Product(id: $id) { name price brand { name } } }",
#                           "variables": {"id": "<random>"}}   (one document, as clients send it)
#
# Both with Basic auth, over PRODUCTS (default 10,000) products of 100 brands, for
# DURATION seconds (default 8) per round, ROUNDS (default 5) rounds alternating.
# Reported: requests/s, p50, p99 and the server's CPU per request (from /proc),
# medians (min–max), and GraphQL's ratio to REST. The target is GraphQL within 1.5×
# of REST.
#
#   bench/graphql.sh
# Writes bench/results/<date>-graphql.md (REPORT overrides).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROUND=${DURATION:-8}
PRODUCTS=${PRODUCTS:-10000}
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-graphql.md}
WORK=$(mktemp -d /tmp/lyre-graphql.XXXXXX)

source "$ROOT/bench/lib.sh"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)

APP=$WORK/lyre-graphql/root/components/shop
mkdir -p "$APP"
printf "rest: true\ngraphqlSchema:\n  files: '*.graphql'\ngraphql: true\n" >"$APP/config.yaml"
cat >"$APP/schema.graphql" <<'GRAPHQL'
type Product @table(database: "shop") @export {
  id: ID @primaryKey
  name: String
  price: Float
  brandId: ID @indexed
  brand: Brand @relationship(from: brandId)
}
type Brand @table(database: "shop") @export {
  id: ID @primaryKey
  name: String
}
GRAPHQL
start_lyre graphql
AUTH="admin:password"
OPS="http://127.0.0.1:$LYRE_PORT"
brands=$(seq 0 99 | awk '{printf "%s{\"id\":\"b%d\",\"name\":\"Brand %d\"}", (NR > 1 ? "," : ""), $1, $1}')
curl -fsS -u "$AUTH" -H 'content-type: application/json' "$OPS" \
  -d "{\"operation\":\"upsert\",\"database\":\"shop\",\"table\":\"Brand\",\"records\":[$brands]}" >/dev/null
products=$(seq 0 $((PRODUCTS - 1)) | awk '{printf "%s{\"id\":\"p%d\",\"name\":\"Product %d\",\"price\":%d.5,\"brandId\":\"b%d\"}", (NR > 1 ? "," : ""), $1, $1, $1 % 97, $1 % 100}')
echo "{\"operation\":\"upsert\",\"database\":\"shop\",\"table\":\"Product\",\"records\":[$products]}" |
  curl -fsS -u "$AUTH" -H 'content-type: application/json' "$OPS" --data-binary @- >/dev/null

common="wrk.headers[\"Authorization\"] = \"Basic YWRtaW46cGFzc3dvcmQ=\"
local products = $PRODUCTS"
cat >"$WORK/rest.lua" <<LUA
$common
request = function()
  return wrk.format("GET", "/Product/?id==p" .. math.random(0, products - 1) .. "&select(name,price,brand%7Bname%7D)")
end
LUA
cat >"$WORK/graphql.lua" <<LUA
$common
wrk.headers["Content-Type"] = "application/json"
request = function()
  local body = '{"query": "query P(\$id: ID) { Product(id: \$id) { name price brand { name } } }", "variables": {"id": "p' .. math.random(0, products - 1) .. '"}}'
  return wrk.format("POST", "/graphql", nil, body)
end
LUA

# Both answer the same record before anything is measured.
rest_answer=$(curl -fsS -u "$AUTH" "http://127.0.0.1:$LYRE_REST/Product/?id==p7&select(name,price,brand%7Bname%7D)")
graphql_answer=$(curl -fsS -u "$AUTH" -H 'content-type: application/json' "http://127.0.0.1:$LYRE_REST/graphql" \
  -d '{"query": "{ Product(id: \"p7\") { name price brand { name } } }"}')
echo "REST: $rest_answer"
echo "GraphQL: $graphql_answer"
[ "{\"data\":{\"Product\":$rest_answer}}" = "$graphql_answer" ] || { echo "the answers differ" >&2; exit 1; }

: >"$WORK/rounds.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for name in rest graphql; do
    wrk_round "$round" "$name" "$LYRE_PID" "$LYRE_REST" "$WORK/$name.lua"
  done
done

{
  echo "# GraphQL against REST, one relationship level — $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared. Lyre on CPU 0 with one"
  echo "request thread, \`wrk -t1 -c32 -d${SECONDS_PER_ROUND}s\` on CPU 1, $PRODUCTS products of 100 brands, a random product"
  echo "with its brand's name per request, Basic auth, $ROUNDS alternating rounds. Medians (min–max); CPU is the"
  echo "server's user + system time per request; the ratio is REST's requests/s over GraphQL's."
  echo
  echo "| query | requests/s | p50 µs | p99 µs | CPU µs/request | non-2xx |"
  echo "|---|---|---|---|---|---|"
  awk -F'\t' "$ROUND_STATS"'
    { rps[$2] = rps[$2] " " $3; p50[$2] = p50[$2] " " $4; p99[$2] = p99[$2] " " $5; cpu[$2] = cpu[$2] " " $6; err[$2] += $7 }
    END {
      split("rest graphql", names, " ")
      for (k = 1; k <= 2; k++) {
        s = names[k]
        printf "| %s | %.0f (%s) | %.0f | %.0f | %.2f | %d |\n", s, median(rps[s]), span(rps[s]), median(p50[s]), median(p99[s]), median(cpu[s]), err[s]
      }
      printf "\nREST / GraphQL: %.2f× (target: at most 1.5×)\n", median(rps["rest"]) / median(rps["graphql"])
    }' "$WORK/rounds.tsv"
  echo
  echo "Per round (round, query, requests/s, p50 µs, p99 µs, CPU µs/request, non-2xx):"
  echo
  echo '```'
  cat "$WORK/rounds.tsv"
  echo '```'
} >"$REPORT"
cat "$REPORT"
