#!/usr/bin/env bash
# Where the time of a synchronous request goes at a fixed 1k req/s, request by request: the direct lane (the
# simulator alone), the bare forwarder (the floor) and mediagate, one after the other, each traced for 5 s
# (perf's syscall tracepoints on the server and the load generator) while `fixed-rate` loads it over 8
# connections; `tail-breakdown` follows every request from the client's send to its receipt. Pinned like
# bench/run.sh. Writes bench/profiles/tail.txt. Needs perf (linux-perf); uses only 127.0.0.1.
#   bash bench/tail.sh
set -euo pipefail
cd "$(dirname "$0")/.."
command -v perf >/dev/null || { apt-get update -qq && apt-get install -y -qq linux-perf; }
cargo build --release --locked -q -p mediagate -p mediagate-bench --bin mediagate --bin bare-forwarder --bin fixed-rate --bin tail-breakdown
source bench/stack.sh
bin=target/release
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$work"' EXIT
sim=127.0.0.1:19131
upstream_path=/cn-beijing/api/v1/services/aigc/multimodal-generation/generation
envelope='{"model":"beta-image-2.0-pro","input":{"messages":[{"role":"user","content":[{"text":"bench"}]}]},"parameters":{"n":1}}'
start_simulator $bin $sim
sim_pid=$!
start_gateway $bin "$work/data" 19132 $sim
taskset -c 0 $bin/bare-forwarder 127.0.0.1:19133 "http://$sim$upstream_path" bench-cn-beijing &
floor_pid=$!
sleep 0.5

# lane NAME SERVER_PID PORT PATH KEY BODY
lane() {
  local name=$1 server=$2 port=$3 path=$4 key=$5 body=$6
  taskset -c 1 $bin/fixed-rate "127.0.0.1:$port" "$path" 1000 2 "$key" "$body" >/dev/null # warm-up
  taskset -c 1 $bin/fixed-rate "127.0.0.1:$port" "$path" 1000 7 "$key" "$body" > "$work/rate.txt" &
  local client=$!
  sleep 1
  $bin/tail-breakdown sockets "$server" > "$work/server.sockets"
  $bin/tail-breakdown sockets "$client" > "$work/client.sockets"
  perf record -q -o "$work/trace.data" -p "$server,$client" \
    -e 'syscalls:sys_enter_recvfrom,syscalls:sys_exit_recvfrom,syscalls:sys_enter_sendto,syscalls:sys_exit_sendto' \
    -e 'syscalls:sys_enter_writev,syscalls:sys_exit_writev,syscalls:sys_enter_pwrite64,syscalls:sys_exit_pwrite64' \
    -- sleep 5 2>/dev/null
  wait $client
  perf script -i "$work/trace.data" -F comm,pid,tid,time,event,trace 2>/dev/null |
    $bin/tail-breakdown "$name" "$server" "$work/server.sockets" "$client" "$work/client.sockets"
  echo "fixed-rate over the whole 7 s (p50 p99 errors, us, traced for 5 of them): $(cat "$work/rate.txt")"
  echo
}

mkdir -p bench/profiles
out=bench/profiles/tail.txt
{
  echo "# Where a synchronous request's time goes at a fixed 1k req/s, $(date -u), build $(git rev-parse --short HEAD)"
  echo "# bash bench/tail.sh: perf's syscall tracepoints on the server (core 0) and fixed-rate (core 1); microseconds."
  echo "# Tracing adds a few microseconds to each system call, so totals run above bench/run.sh's."
  echo
  lane "direct to simulator" $sim_pid 19131 $upstream_path bench-cn-beijing "$envelope"
  lane "bare forwarder (floor)" $floor_pid 19133 /forward none "$envelope"
  lane mediagate "$GATEWAY_PID" 19132 "$(lane_path sync)" "$GATEWAY_KEY" "$(lane_body sync)"
} > "$out"
cat "$out"
