#!/usr/bin/env bash
# Two builds of the gateway side by side: the sync, async and read lanes of bench/run.sh (wrk, gateway pinned
# to core 0, load and simulator to core 1) and the sync lane's latency at a fixed 1k req/s (bench's
# fixed-rate generator), alternating between the builds for rounds of 5 s, so a change is judged against
# its parent in one run rather than against a figure from another hour.
#   bash bench/ab.sh OLD_REV [NEW_REV]   (NEW_REV defaults to the work tree)
#   AB_LANES="sync@1k" bash bench/ab.sh OLD_REV   (some of the lanes: sync async read sync@1k)
#   AB_ROUNDS=9 bash bench/ab.sh OLD_REV   (more rounds than 5, to judge a smaller difference)
# Prints `lane build req/s cpu-us-per-request` and `sync@1k build p50-us p99-us` per run. Installs wrk if it
# is missing; needs taskset and bc. Result copies are off (BENCH_MIRROR=true turns them on: bench/stack.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=${1:?usage: bash bench/ab.sh OLD_REV [NEW_REV]}
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
source bench/stack.sh
OLD=$(build "$old_rev")
cargo build --release --locked -q -p mediagate-bench --bin fixed-rate
if [ -n "${2:-}" ]; then NEW=$(build "$2"); else cargo build --release --locked -q -p mediagate; NEW=$PWD/target/release; fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
sim=127.0.0.1:19401
start_simulator "$NEW" $sim
declare -A bin=([old]=$OLD [new]=$NEW) port=([old]=19402 [new]=19403) pid key task
for v in old new; do
  start_gateway "${bin[$v]}" "$work/$v" "${port[$v]}" $sim
  pid[$v]=$GATEWAY_PID key[$v]=$GATEWAY_KEY
  task[$v]=$(submit_task "${port[$v]}" "${key[$v]}")
  for lane in sync async read; do lane_script $lane "${key[$v]}" > "$work/$v-$lane.lua"; done
done
for v in old new; do wait_finished "${port[$v]}" "${key[$v]}" "${task[$v]}"; done
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }
run() { # BUILD LANE
  local c0 c1 out n
  c0=$(cpu "${pid[$1]}")
  out=$(taskset -c 1 wrk -t1 -c"$(lane_connections "$2")" -d5s -s "$work/$1-$2.lua" \
    "http://127.0.0.1:${port[$1]}$(lane_path "$2" "${task[$1]}")" 2>&1)
  c1=$(cpu "${pid[$1]}")
  n=$(echo "$out" | awk '/requests in/{print $1}')
  echo "$2 $1 $(echo "$out" | awk '/Requests\/sec/{print $2}') $(echo "($c1-$c0)*10000/$n" | bc -l | cut -c1-6)" |
    tee -a "$work/runs"
}
at_1k() { # BUILD
  echo "sync@1k $1 $(taskset -c 1 target/release/fixed-rate "127.0.0.1:${port[$1]}" "$(lane_path sync)" 1000 5 \
    "${key[$1]}" "$(lane_body sync)" | cut -d' ' -f1,2)" | tee -a "$work/runs"
}
lanes=${AB_LANES:-sync async read sync@1k}
for lane in $lanes; do
  for _ in $(seq "${AB_ROUNDS:-5}"); do
    for v in old new; do if [ "$lane" = sync@1k ]; then at_1k $v; else run $v $lane; fi; done
  done
done
echo
echo "medians (lane build req/s cpu-us-per-request, or sync@1k build p50-us p99-us):"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for lane in $lanes; do
  for v in old new; do
    runs=$(grep "^$lane $v " "$work/runs")
    echo "$lane $v $(echo "$runs" | cut -d' ' -f3 | median) $(echo "$runs" | cut -d' ' -f4 | median)"
  done
done
