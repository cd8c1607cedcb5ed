#!/usr/bin/env bash
# What one request of the sync lane costs two builds, counted rather than timed: instructions executed by
# the gateway (valgrind's callgrind, every thread, user space) and system calls it made (strace -c), per
# request, at the same fixed rate for both builds, so each batches its writes alike. Counts repeat from run
# to run where bench/ab.sh's CPU time moves with the machine's other work; they leave out what the kernel
# spends in those calls, which ab.sh sees. Writes bench/profiles/cost-<rev>.txt for each build: its totals,
# and the functions by inclusive and by self instructions; keeps each callgrind dump in
# target/cost-<rev>.callgrind (for `callgrind_annotate --tree=caller`).
#   bash bench/cost.sh OLD_REV [NEW_REV]   (NEW_REV defaults to the work tree)
#   COST_RATE=50 COST_SECONDS=20 bash bench/cost.sh OLD_REV   (the defaults)
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=${1:?usage: bash bench/cost.sh OLD_REV [NEW_REV]}
rate=${COST_RATE:-50} seconds=${COST_SECONDS:-20}
command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
command -v strace >/dev/null || { apt-get update -qq && apt-get install -y -qq strace; }
source bench/stack.sh
OLD=$(build "$old_rev")
cargo build --release --locked -q -p mediagate-bench --bin fixed-rate
if [ -n "${2:-}" ]; then NEW=$(build "$2"); new_rev=$2; else cargo build --release --locked -q -p mediagate; NEW=$PWD/target/release; new_rev=work-tree; fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; cat "$work"/*.log >&2 2>/dev/null; rm -rf "$work"' EXIT
sim=127.0.0.1:19601
start_simulator "$NEW" $sim
body=$(lane_body sync)
# measure BIN NAME: the gateway warmed up, then RATE x SECONDS requests counted.
measure() {
  local bin=$1 name=$2 port=19602 data=$work/$2
  local key
  key=$("$bin/mediagate" keys create --account bench --data-dir "$data")
  printf 'listen: 127.0.0.1:%s\ndata_dir: %s\nworkers: 1\nadmin_token_env: BENCH_ADMIN\nupstreams:\n  cn-beijing: {base_url: "http://%s/cn-beijing", api_key_env: BENCH_UPSTREAM_KEY, concurrency: {default: 1000000000}}\nlimits: {max_in_flight_per_account: 100000000, requests_per_second_per_key: 1000000}\nresults: {mirror: false}\n' \
    "$port" "$data" "$sim" > "$data.yaml"
  # A build from before capacity or mirroring refuses their keys: dropped as bench/stack.sh drops them.
  local refused
  for drop in 's/, concurrency: {default: 1000000000}//' '/^results:/d'; do
    refused=$(BENCH_UPSTREAM_KEY=x BENCH_ADMIN=x timeout 1 "$bin/mediagate" serve --config "$data.yaml" 2>&1 || true)
    if [[ $refused == *"unknown field"* ]]; then sed -i "$drop" "$data.yaml"; fi
  done
  # Twice: under callgrind, then under strace alone (valgrind's own system calls would be counted with the
  # gateway's).
  local tool pid tracer
  for tool in callgrind strace; do
    if [ $tool = callgrind ]; then
      BENCH_UPSTREAM_KEY=bench-cn-beijing BENCH_ADMIN=bench-admin MEDIAGATE_LOG=warn \
        valgrind --tool=callgrind --callgrind-out-file="$work/$name.cg" "$bin/mediagate" serve --config "$data.yaml" \
        >"$work/$name.log" 2>&1 &
    else
      BENCH_UPSTREAM_KEY=bench-cn-beijing BENCH_ADMIN=bench-admin MEDIAGATE_LOG=warn \
        "$bin/mediagate" serve --config "$data.yaml" >>"$work/$name.log" 2>&1 &
    fi
    pid=$!
    for _ in $(seq 300); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.2; done
    curl -s -XPOST "http://127.0.0.1:$port/admin/v1/accounts/bench/top-up" -H 'Authorization: Bearer bench-admin' \
      -H 'Content-Type: application/json' -d '{"amount": 1000000000000000}' >/dev/null
    target/release/fixed-rate "127.0.0.1:$port" "$(lane_path sync)" "$rate" 5 "$key" "$body" >/dev/null
    if [ $tool = callgrind ]; then
      callgrind_control -z "$pid" >/dev/null
    else
      strace -c -f -p "$pid" -o "$work/$name.strace" &
      tracer=$!
      sleep 0.5
    fi
    target/release/fixed-rate "127.0.0.1:$port" "$(lane_path sync)" "$rate" "$seconds" "$key" "$body" > "$work/$name.$tool.rate"
    if [ $tool = callgrind ]; then
      callgrind_control -d "$pid" >/dev/null
    else
      kill -INT $tracer; wait $tracer 2>/dev/null || true
    fi
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
}
measure "$OLD" old
measure "$NEW" new
requests=$((rate * seconds))
mkdir -p bench/profiles
for v in old new; do
  rev=$([ $v = old ] && echo "$old_rev" || echo "$new_rev")
  dump=target/cost-$rev.callgrind
  cp "$(ls "$work/$v.cg".* | head -1)" "$dump"
  total=$(callgrind_annotate "$dump" 2>/dev/null | awk '/PROGRAM TOTALS/{gsub(",","",$1); print $1}')
  calls=$(awk '$NF == "total" {print $4}' "$work/$v.strace")
  echo "$v ($rev): $((total / requests)) instructions and $(echo "scale=1; $calls / $requests" | bc) system calls per request"
  {
    echo "# mediagate sync lane, counted: $rev, $(date -u)"
    echo "# bash bench/cost.sh: $requests requests at $rate/s (p50 p99 errors, in us: $(cat "$work/$v.callgrind.rate") under callgrind, $(cat "$work/$v.strace.rate") under strace)"
    echo "instructions per request: $((total / requests)); system calls per request: $(echo "scale=1; $calls / $requests" | bc)"
    echo
    echo "## System calls"
    cat "$work/$v.strace"
    echo
    echo "## Functions by inclusive instructions (percent of the gateway's)"
    callgrind_annotate --inclusive=yes "$dump" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | head -250 | cut -c1-200 || true
    echo
    echo "## Functions by self instructions"
    callgrind_annotate "$dump" 2>/dev/null | grep -E '^ *[0-9,]+ \(' | head -50 | cut -c1-200 || true
  } > "bench/profiles/cost-$rev.txt"
done
