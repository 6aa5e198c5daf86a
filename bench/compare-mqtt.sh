#!/usr/bin/env bash
# MQTT side by side: Lyre against Harper 4.7.29 (topics bound to a record of the
# YCSB application: a publish without retain is a message to the record, which both
# log and deliver), and Lyre (a plain topic) against Debian's mosquitto (the
# bare-broker anchor). Each server alone on CPU 0, the load generator on CPU 1,
# rounds alternating (A B A B ...); fan-out (1 publisher -> SUBSCRIBERS subscribers)
# and fan-in (PUBLISHERS publishers -> 1 subscriber), QoS 0 and 1; then the memory
# of IDLE idle connections on each; then Lyre and mosquitto fan-out at several
# subscriber counts (SWEEP), plotted.
#
#   bench/compare-mqtt.sh
#   ROUNDS=5 MESSAGES=5000 bench/compare-mqtt.sh
#
# Results: bench/results/<date>-mqtt.md and the raw output under
# bench/results/<date>-mqtt/.
set -euo pipefail

ROOT=$(cd "$(dirname "$0")/.." && pwd)
ROUNDS=${ROUNDS:-3}
MESSAGES=${MESSAGES:-2000}
SUBSCRIBERS=${SUBSCRIBERS:-100}
PUBLISHERS=${PUBLISHERS:-100}
IDLE=${IDLE:-5000}
SWEEP=${SWEEP:-"10 50 100 200 400"}
DATE=$(date -u +%Y-%m-%d)
OUT=$ROOT/bench/results/$DATE-mqtt
WORK=$(mktemp -d /tmp/lyre-bench.XXXXXX)
ASYNC=false
RECORDS=0

source "$ROOT/bench/lib.sh"

MOSQUITTO_PORT=1899
start_mosquitto() {
  printf 'listener %s 127.0.0.1\nallow_anonymous true\nmax_queued_messages 100000\n' "$MOSQUITTO_PORT" >"$WORK/mosquitto.conf"
  setsid taskset -c 0 mosquitto -c "$WORK/mosquitto.conf" >"$WORK/mosquitto.log" 2>&1 &
  MOSQUITTO_PID=$!
  PIDS+=("$MOSQUITTO_PID")
  sleep 1
}

# lyre-bench mqtt "$@" with Lyre as the target and the reference given by the
# caller's --compare-* arguments.
bench_mqtt() {
  local name=$1; shift
  taskset -c 1 "$BENCH" mqtt --rounds "$ROUNDS" --settle 0 \
    --name lyre --url "http://127.0.0.1:$LYRE_PORT" --rest "http://127.0.0.1:$LYRE_REST" --pid "$LYRE_PID" \
    --mqtt "127.0.0.1:$((LYRE_PORT + 10))" "$@" --json "$OUT/$name.json" | tee "$OUT/$name.txt"
}

# The clients and messages per publisher of pattern $1: fan-out SUBSCRIBERS
# subscribers of MESSAGES messages; fan-in PUBLISHERS publishers of a tenth each.
sizes() {
  clients=$SUBSCRIBERS messages=$MESSAGES
  if [ "$1" = fan-in ]; then clients=$PUBLISHERS messages=$((MESSAGES / 2)); fi
}

mkdir -p "$OUT"
(cd "$ROOT" && cargo build --release --locked -p lyre-server -p lyre-bench)
install_harper
command -v mosquitto >/dev/null || { echo "mosquitto is needed (apt-get install mosquitto)" >&2; exit 1; }

# Against Harper: a record topic of the YCSB application.
for pattern in fan-out fan-in; do
  sizes "$pattern"
  for qos in 0 1; do
    start_harper "mqtt-$pattern-$qos" ycsb
    start_lyre "mqtt-$pattern-$qos" ycsb
    harper_node=$(pgrep -n -f "harperdb run" || echo "$HARPER_PID")
    bench_mqtt "harper-$pattern-qos$qos" --pattern "$pattern" --qos "$qos" --clients "$clients" --messages "$messages" \
      --compare-name harper --compare-url http://127.0.0.1:9925 --compare-rest http://127.0.0.1:9926 \
      --compare-pid "$harper_node" --compare-mqtt 127.0.0.1:1883
    cleanup
  done
done

# Against mosquitto: a plain topic.
for pattern in fan-out fan-in; do
  sizes "$pattern"
  for qos in 0 1; do
    start_mosquitto
    start_lyre "mqtt-plain-$pattern-$qos"
    bench_mqtt "mosquitto-$pattern-qos$qos" --pattern "$pattern" --qos "$qos" --clients "$clients" \
      --messages "$messages" --topic bench/plain \
      --compare-name mosquitto --compare-url "http://127.0.0.1:$MOSQUITTO_PORT" --compare-pid "$MOSQUITTO_PID" \
      --compare-mqtt "127.0.0.1:$MOSQUITTO_PORT"
    cleanup
  done
done

# Idle connections' memory: Lyre beside Harper, then beside mosquitto.
start_harper mqtt-idle
start_lyre mqtt-idle
harper_node=$(pgrep -n -f "harperdb run" || echo "$HARPER_PID")
bench_mqtt idle-harper --pattern idle --clients "$IDLE" \
  --compare-name harper --compare-url http://127.0.0.1:9925 --compare-pid "$harper_node" --compare-mqtt 127.0.0.1:1883
cleanup
start_mosquitto
start_lyre mqtt-idle-2
bench_mqtt idle-mosquitto --pattern idle --clients "$IDLE" \
  --compare-name mosquitto --compare-url "http://127.0.0.1:$MOSQUITTO_PORT" --compare-pid "$MOSQUITTO_PID" \
  --compare-mqtt "127.0.0.1:$MOSQUITTO_PORT"
cleanup

# Deliveries per second against the subscriber count (QoS 0, plain topic).
sweep=()
for n in $SWEEP; do
  start_mosquitto
  start_lyre "mqtt-sweep-$n"
  bench_mqtt "sweep-$n" --pattern fan-out --qos 0 --clients "$n" --messages "$MESSAGES" --topic bench/plain \
    --compare-name mosquitto --compare-url "http://127.0.0.1:$MOSQUITTO_PORT" --compare-pid "$MOSQUITTO_PID" \
    --compare-mqtt "127.0.0.1:$MOSQUITTO_PORT"
  sweep+=("$OUT/sweep-$n.json")
  cleanup
done
"$BENCH" chart-sweep --out "$ROOT/bench/results/$DATE-mqtt-sweep.png" "${sweep[@]}"

{
  echo "# MQTT: Lyre vs Harper 4.7.29 and mosquitto $(mosquitto -h 2>/dev/null | head -1 | awk '{print $3}') — $DATE"
  echo
  echo "Machine: $(nproc) cores, $(free -g | awk '/Mem:/{print $2}') GiB. Servers on CPU 0, load on CPU 1,"
  echo "$ROUNDS alternating rounds, medians. Messages per publisher: $MESSAGES (fan-in: $((MESSAGES / 2)))."
  for f in "$OUT"/*.txt; do
    echo
    echo "## $(basename "$f" .txt)"
    echo
    echo '```'
    cat "$f"
    echo '```'
  done
} >"$ROOT/bench/results/$DATE-mqtt.md"
echo "wrote bench/results/$DATE-mqtt.md"
