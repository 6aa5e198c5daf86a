#!/usr/bin/env bash
# The cost of permissions and of each way to log in: one Lyre (pinned to CPU 0, one
# request thread), measured with the load on CPU 1 alternating round by round between
# the super user (Basic) and a user with a role (Basic, Bearer token, session cookie),
# on REST GET (YCSB C) and search_by_id. Also the token issue rate, with wrk.
#
#   bench/compare-auth.sh
#   ROUNDS=5 RECORDS=20000 bench/compare-auth.sh
#
# Results: bench/results/<date>-auth.md, raw JSON under bench/results/<date>-auth/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
RECORDS=${RECORDS:-20000}
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/bench/results/$DATE-auth
WORK=$(mktemp -d /tmp/lyre-auth.XXXXXX)
OPS=http://127.0.0.1:9945
REST=http://127.0.0.1:9946

source "$ROOT/bench/lib.sh"

op() { curl -fsS -u "$1" "$OPS" -H 'content-type: application/json' -d "$2"; }

(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
mkdir -p "$OUT"
install_app "$WORK/root" ycsb
setsid taskset -c 0 env HDB_ADMIN_USERNAME=admin HDB_ADMIN_PASSWORD=password OPERATIONSAPI_NETWORK_PORT=9945 \
  HTTP_PORT=9946 LOGGING_LEVEL=warn THREADS_COUNT=1 AUTHENTICATION_MAXLOGINATTEMPTS=0 "$LYRE" run --root "$WORK/root" \
  >"$WORK/lyre.log" 2>&1 &
PIDS+=("$!")
PID=$!
wait_health 9945

# A role granting the YCSB table (no attribute list), and the Operations API
# benchmark's database as a structure user (its set-up recreates the table).
op admin:password '{"operation":"create_database","database":"bench"}' >/dev/null || true
op admin:password '{"operation":"add_role","role":"bench_role","permission":{"structure_user":["bench"],
  "ycsb":{"tables":{"usertable":{"read":true,"insert":true,"update":true,"delete":true,"attribute_permissions":[]}}}}}' >/dev/null
op admin:password '{"operation":"add_user","username":"bench","password":"bench-pw","role":"bench_role","active":true}' >/dev/null
TOKEN=$(op bench:bench-pw '{"operation":"create_authentication_tokens"}' | sed 's/.*"operation_token":"\([^"]*\)".*/\1/')
COOKIE=$(curl -fsS -D - -o /dev/null "$OPS" -H 'content-type: application/json' \
  -d '{"operation":"login","username":"bench","password":"bench-pw"}' | sed -n 's/^[Ss]et-[Cc]ookie: \([^;]*\);.*/\1/p')

compare() { # $1: label, $2: compare auth header or empty, rest: workload args
  local label=$1 header=$2; shift 2
  local auth=()
  [ -n "$header" ] && auth=(--compare-auth-header "$header")
  taskset -c 1 "$BENCH" "$@" --rounds "$ROUNDS" --settle 3 \
    --name super_user --url "$OPS" --rest "$REST" --pid "$PID" \
    --compare-name "$label" --compare-url "$OPS" --compare-rest "$REST" --compare-pid "$PID" \
    --compare-user bench --compare-password bench-pw "${auth[@]}" \
    --json "$OUT/$label-$1.json" | tee "$OUT/$label-$1.txt"
}

for mode in basic bearer cookie; do
  case $mode in
    basic) header="" ;;
    bearer) header="authorization: Bearer $TOKEN" ;;
    cookie) header="cookie: $COOKIE" ;;
  esac
  compare "role-$mode" "$header" ycsb c --records "$RECORDS" --operations 100000 --concurrency 32
  compare "role-$mode" "$header" ops-search --kind id --records "$RECORDS" --requests 20000 --concurrency 16
done

# Token issue rate: create_authentication_tokens for the caller (a cached Basic login).
cat >"$WORK/tokens.lua" <<'LUA'
wrk.method = "POST"
wrk.body = '{"operation":"create_authentication_tokens"}'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Basic YmVuY2g6YmVuY2gtcHc="
LUA
taskset -c 1 wrk -t1 -c8 -d10s -s "$WORK/tokens.lua" "$OPS/" | tee "$OUT/tokens.txt"

{
  echo "# Permissions and logins: a role user against the super user — $DATE"
  echo
  echo "Lyre at $(cd "$ROOT" && git rev-parse --short HEAD), pinned to CPU 0 with one request thread; load on CPU 1, $ROUNDS alternating rounds, medians (min–max). \`bench/compare-auth.sh\`."
  echo
  for f in "$OUT"/role-*.txt; do
    echo "## $(basename "$f" .txt)"
    echo
    echo '```'
    cat "$f"
    echo '```'
    echo
  done
  echo "## token issue rate (create_authentication_tokens, wrk -t1 -c8 -d10s)"
  echo
  echo '```'
  cat "$OUT/tokens.txt"
  echo '```'
} >"$ROOT/bench/results/$DATE-auth.md"
echo "report: $ROOT/bench/results/$DATE-auth.md"
