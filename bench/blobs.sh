#!/usr/bin/env bash
# Blob throughput, Lyre against Harper 5 (built from source by ../shared/tools/harper5.sh),
# each alone on CPU 0 with one request thread, `wrk -t1 -c4` on CPU 1, over a table
# `Media { id: ID @primaryKey, title: String, image: Blob }`:
#
#   write     PUT /Media/<random of RECORDS> {"title": "t", "image": "<BLOB_KB KiB of text>"}
#             (both store the text as a text/plain blob file; an overwrite frees the old one)
#   read      GET /Media/<random of RECORDS>.image   (the blob's bytes, streamed from its file)
#   upload    PUT /Media/<random>.image with BLOB_KB KiB of bytes: Lyre only (Harper 5
#             replaces the whole record with a binary body instead of streaming it into
#             the attribute, so it has no equivalent)
#
# Basic auth on both (Harper with authorizeLocal off), default durability on both
# (Lyre flushes each blob file and its directory before committing the record that
# references it; ASYNC=true sets storage.writeAsync on both, and Lyre then does not
# flush blob files either). RECORDS (default 200) records are written first.
# Reported: requests/s, MB/s, p50, p99 and the server's CPU per request, medians
# (min–max) of ROUNDS (default 5) alternating rounds of DURATION (default 8) seconds.
#
#   bench/blobs.sh
# Writes bench/results/<date>-blobs.md (REPORT overrides).
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-5}
SECONDS_PER_ROUND=${DURATION:-8}
RECORDS=${RECORDS:-200}
BLOB_KB=${BLOB_KB:-1024}
CONNECTIONS=${CONNECTIONS:-4}
HARPER5=${HARPER5:-$ROOT/../shared/tools/harper5.sh}
REPORT=${REPORT:-$ROOT/bench/results/$(date -u +%Y-%m-%d)-blobs.md}
WORK=$(mktemp -d /tmp/lyre-blobs.XXXXXX)

source "$ROOT/bench/lib.sh"
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install wrk" >&2; exit 1; }
[ -d "$HOME/.cache/harper5/src" ] ||
  { echo "Harper 5 is needed: HARPER_MIRROR=<git dir> $HARPER5 setup" >&2; exit 1; }
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)

SCHEMA='type Media @table(database: "media") @export {
  id: ID @primaryKey
  title: String
  image: Blob
}'
write_app() {
  mkdir -p "$1/components/media"
  printf 'rest: true\ngraphqlSchema:\n  files: "*.graphql"\n' >"$1/components/media/config.yaml"
  echo "$SCHEMA" >"$1/components/media/schema.graphql"
}

# Harper 5 on CPU 0, ports 19925/19926; the first run installs, the second loads the app.
H_OPS=19925
H_REST=19926
start_harper5() {
  local root=$WORK/harper5
  port_free "$H_OPS"
  setsid "$HARPER5" run "$root" "$H_OPS" "$H_REST" 11883 >"$root.log" 2>&1 &
  local pid=$!
  wait_health "$H_OPS"
  kill -TERM -- "-$pid"
  while curl -fs -m 1 "http://127.0.0.1:$H_OPS/health" >/dev/null 2>&1; do sleep 0.2; done
  sleep 1
  write_app "$root"
  setsid taskset -c 0 env HARPER5_STRICT_AUTH=1 STORAGE_WRITEASYNC="${ASYNC:-false}" LOGGING_LEVEL=warn \
    "$HARPER5" run "$root" "$H_OPS" "$H_REST" 11883 >>"$root.log" 2>&1 &
  HARPER_PID=$!
  PIDS+=("$HARPER_PID")
  wait_health "$H_OPS"
}

write_app "$WORK/lyre-blobs/root"
start_lyre blobs
start_harper5

BYTES=$((BLOB_KB * 1024))
common="wrk.headers[\"Authorization\"] = \"Basic YWRtaW46cGFzc3dvcmQ=\"
local records = $RECORDS
local text = string.rep(\"b\", $BYTES)"
cat >"$WORK/write.lua" <<LUA
$common
wrk.headers["Content-Type"] = "application/json"
local body = '{"title": "t", "image": "' .. text .. '"}'
request = function()
  return wrk.format("PUT", "/Media/" .. math.random(0, records - 1), nil, body)
end
LUA
cat >"$WORK/read.lua" <<LUA
$common
request = function()
  return wrk.format("GET", "/Media/" .. math.random(0, records - 1) .. ".image")
end
LUA
cat >"$WORK/upload.lua" <<LUA
$common
wrk.headers["Content-Type"] = "application/octet-stream"
request = function()
  return wrk.format("PUT", "/Media/u" .. math.random(0, records - 1) .. ".image", nil, text)
end
LUA

# Every record once, on both, and both answer the same bytes before anything is measured.
python3 - "$BYTES" >"$WORK/record.json" <<'PY'
import json, sys
print(json.dumps({"title": "t", "image": "b" * int(sys.argv[1])}))
PY
for port in "$LYRE_REST" "$H_REST"; do
  for id in $(seq 0 $((RECORDS - 1))); do
    curl -fsS -u admin:password -X PUT -H 'content-type: application/json' --data-binary @"$WORK/record.json" \
      "http://127.0.0.1:$port/Media/$id" >/dev/null
  done
done
lyre_sum=$(curl -fsS -u admin:password "http://127.0.0.1:$LYRE_REST/Media/7.image" | sha256sum)
harper_sum=$(curl -fsS -u admin:password "http://127.0.0.1:$H_REST/Media/7.image" | sha256sum)
[ "$lyre_sum" = "$harper_sum" ] || { echo "the blobs differ: $lyre_sum / $harper_sum" >&2; exit 1; }
echo "both serve the same $BYTES bytes"

: >"$WORK/rounds.tsv"
for round in $(seq 1 "$ROUNDS"); do
  for workload in write read; do
    wrk_round "$round" "lyre-$workload" "$LYRE_PID" "$LYRE_REST" "$WORK/$workload.lua"
    wrk_round "$round" "harper5-$workload" "$HARPER_PID" "$H_REST" "$WORK/$workload.lua"
  done
  wrk_round "$round" "lyre-upload" "$LYRE_PID" "$LYRE_REST" "$WORK/upload.lua"
done

{
  echo "# Blobs, Lyre against Harper 5 — $(date -u '+%Y-%m-%d %H:%M') UTC, commit $(git -C "$ROOT" rev-parse --short HEAD)"
  echo
  echo "Machine: $(nproc) cores ($(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs)), shared. Each server on CPU 0"
  echo "with one request thread, \`wrk -t1 -c$CONNECTIONS -d${SECONDS_PER_ROUND}s\` on CPU 1, blobs of $BLOB_KB KiB over $RECORDS"
  echo "records, Basic auth, storage.writeAsync ${ASYNC:-false} on both, $ROUNDS alternating rounds. Medians (min–max);"
  echo "CPU is the server's user + system time per request. \`write\`: a JSON PUT whose text becomes a blob file;"
  echo "\`read\`: GET /Media/<id>.image; \`upload\`: a binary PUT streamed into the attribute (Lyre only)."
  echo
  echo "| server, workload | requests/s | MB/s | p50 µs | p99 µs | CPU µs/request | non-2xx |"
  echo "|---|---|---|---|---|---|---|"
  awk -F'\t' -v bytes="$BYTES" "$ROUND_STATS"'
    { rps[$2] = rps[$2] " " $3; p50[$2] = p50[$2] " " $4; p99[$2] = p99[$2] " " $5; cpu[$2] = cpu[$2] " " $6; err[$2] += $7 }
    END {
      split("lyre-write harper5-write lyre-read harper5-read lyre-upload", names, " ")
      for (k = 1; k <= 5; k++) {
        s = names[k]
        printf "| %s | %.0f (%s) | %.0f | %.0f | %.0f | %.0f | %d |\n", s, median(rps[s]), span(rps[s]), median(rps[s]) * bytes / 1e6, median(p50[s]), median(p99[s]), median(cpu[s]), err[s]
      }
      printf "\nLyre / Harper 5: write %.2f×, read %.2f× (requests/s)\n", median(rps["lyre-write"]) / median(rps["harper5-write"]), median(rps["lyre-read"]) / median(rps["harper5-read"])
    }' "$WORK/rounds.tsv"
  echo
  echo "Per round (round, server-workload, requests/s, p50 µs, p99 µs, CPU µs/request, non-2xx):"
  echo
  echo '```'
  cat "$WORK/rounds.tsv"
  echo '```'
} >"$REPORT"
cat "$REPORT"
