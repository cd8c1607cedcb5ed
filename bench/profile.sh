#!/usr/bin/env bash
# Profiles the gateway on the synchronous forward lane (`beta-image-2.0-pro_t2i` against the simulator in
# instant mode), pinned like bench/run.sh: where the CPU time of a request goes, per thread, with call
# graphs. Writes bench/profiles/<lane>.txt. Needs perf (linux-perf) and wrk; uses only 127.0.0.1.
#   bash bench/profile.sh [sync|async]
set -euo pipefail
cd "$(dirname "$0")/.."
lane=${1:-sync}
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf; }
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
cargo build --release --locked -p mediagate
bin=target/release/mediagate
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
sim=127.0.0.1:19101
gw=127.0.0.1:19102
taskset -c 1 $bin simulate --listen $sim --time-scale 0 --key-prefix prof >/dev/null 2>&1 &
key=$($bin keys create --account prof --data-dir "$work/data")
cat > "$work/config.yaml" <<EOF
listen: $gw
data_dir: $work/data
workers: 1
admin_token_env: PROF_ADMIN
upstreams:
  cn-beijing: {base_url: 'http://$sim/cn-beijing', api_key_env: PROF_UPSTREAM_KEY}
limits: {max_in_flight_per_account: 100000000, requests_per_second_per_key: 1000000}
EOF
PROF_UPSTREAM_KEY=prof-cn-beijing PROF_ADMIN=prof MEDIAGATE_LOG=warn taskset -c 0 $bin serve --config "$work/config.yaml" >/dev/null 2>&1 &
gateway=$!
sleep 1
curl -s -XPOST "http://$gw/admin/v1/accounts/prof/top-up" -H 'Authorization: Bearer prof' \
  -H 'Content-Type: application/json' -d '{"amount": 1000000000000000}' >/dev/null
if [ "$lane" = sync ]; then
  path=/v1/images/generations body='{"model":"beta-image-2.0-pro_t2i","prompt":"bench","n":1}' conns=16
else
  path=/v1/videos/generations body='{"model":"alpha2.6-t2v_t2v","prompt":"bench","duration":5}' conns=64
fi
cat > "$work/load.lua" <<EOF
wrk.method = "POST"
wrk.body = '$body'
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Bearer $key"
EOF
taskset -c 1 wrk -t1 -c$conns -d14s -s "$work/load.lua" "http://$gw$path" > "$work/wrk.txt" &
sleep 2
perf record -e cpu-clock -F 1000 --call-graph dwarf,32768 -p $gateway -o "$work/perf.data" -- sleep 6 2>/dev/null
wait %3 2>/dev/null || true
mkdir -p bench/profiles
out=bench/profiles/$lane.txt
{
  echo "# mediagate $lane lane profile, $(date -u)"
  echo "# bash bench/profile.sh $lane: perf record -e cpu-clock --call-graph dwarf on the gateway (core 0) under wrk load"
  grep -E "Requests/sec" "$work/wrk.txt" || true
  echo
  echo "## CPU by thread"
  perf report -i "$work/perf.data" --stdio --no-children --sort comm -g none 2>/dev/null | grep -E '^ +[0-9]'
  for thread in 'actix-rt|system' store-writer; do
    echo
    echo "## $thread: inclusive time of the main frames (percent of all samples)"
    perf report -i "$work/perf.data" --stdio --children --comms "$thread" --sort symbol -g none --percent-limit 2 2>/dev/null \
      | grep -E '^ +[0-9]' | grep -E 'mediagate|redb|awc|actix_http|serde|fdatasync|pwrite|send|recv|malloc|free' \
      | sed 's/  */ /g' | cut -c1-170 | head -40
  done
} > "$out"
echo "wrote $out"
