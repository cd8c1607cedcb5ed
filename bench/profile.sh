#!/usr/bin/env bash
# Profiles the gateway under one lane's load (sync: `beta-image-2.0-pro_t2i` against the simulator in
# instant mode; async submissions; reads of a finished task), pinned like bench/run.sh: where the CPU time
# of a request goes, per thread, with call graphs. Writes bench/profiles/<lane>.txt and keeps the raw
# profile in target/profile-<lane>.data (for `perf report -i`). Needs perf (linux-perf) and wrk; uses only
# 127.0.0.1. With a revision, profiles that build instead (made as bench/ab.sh makes it) and writes
# bench/profiles/<lane>-<rev>.txt, to set beside today's.
#   bash bench/profile.sh [sync|async|read] [REV]
set -euo pipefail
cd "$(dirname "$0")/.."
lane=${1:-sync}
rev=${2:-}
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
source bench/stack.sh
if [ -n "$rev" ]; then
  bin=$(build "$rev")
else
  cargo build --release --locked -p mediagate
  bin=target/release
fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
sim=127.0.0.1:19101
start_simulator "$bin" $sim
start_gateway "$bin" "$work/data" 19102 $sim
gateway=$GATEWAY_PID
lane_script "$lane" "$GATEWAY_KEY" > "$work/load.lua"
task=
if [ "$lane" = read ]; then
  task=$(submit_task 19102 "$GATEWAY_KEY")
  wait_finished 19102 "$GATEWAY_KEY" "$task"
fi
taskset -c 1 wrk -t1 -c"$(lane_connections "$lane")" -d14s -s "$work/load.lua" "http://127.0.0.1:19102$(lane_path "$lane" "$task")" > "$work/wrk.txt" &
load=$!
sleep 2
data=target/profile-$lane${rev:+-$rev}.data
perf record -e cpu-clock -F 1000 --call-graph dwarf,32768 -p $gateway -o "$data" -- sleep 6 2>/dev/null
wait $load 2>/dev/null || true
mkdir -p bench/profiles
out=bench/profiles/$lane${rev:+-$rev}.txt
{
  echo "# mediagate $lane lane profile${rev:+ of $rev}, $(date -u)"
  echo "# bash bench/profile.sh $lane: perf record -e cpu-clock --call-graph dwarf on the gateway (core 0) under wrk load"
  grep -E "Requests/sec" "$work/wrk.txt" || true
  echo
  echo "## CPU by thread"
  perf report -i "$data" --stdio --no-children --sort comm -g none 2>/dev/null | grep -E '^ +[0-9]'
  echo
  echo "## Self time by function, every thread (percent of all samples)"
  perf report -i "$data" --stdio --no-children --sort symbol -g none --percent-limit 0.5 2>/dev/null \
    | grep -E '^ +[0-9]' | sed 's/  */ /g' | cut -c1-170 | head -50
  # Thread names as the kernel keeps them: cut to 15 characters (`store-checkpoint` is `store-checkpoin`).
  for thread in 'actix-rt|system' store-writer store-checkpoin store-syncer; do
    echo
    echo "## $thread: inclusive time of the main frames (percent of all samples)"
    perf report -i "$data" --stdio --children --comms "$thread" --sort comm,symbol -g none --percent-limit 2 2>/dev/null \
      | grep -E '^ +[0-9]' | grep -E 'mediagate|redb|awc|actix_http|serde|fdatasync|pwrite|send|recv|malloc|free' \
      | sed 's/  */ /g' | cut -c1-170 | head -40
  done
} > "$out"
echo "wrote $out"
