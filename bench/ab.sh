#!/usr/bin/env bash
# Two builds of the gateway side by side: the sync, async and read lanes of bench/run.sh (wrk, gateway pinned
# to core 0, load and simulator to core 1), alternating between the builds for 5 rounds of 5 s, so a change
# is judged against its parent in one run rather than against a figure from another hour.
#   bash bench/ab.sh OLD_REV [NEW_REV]   (NEW_REV defaults to the work tree)
# Prints `lane build req/s cpu-us-per-request` per run. Needs wrk, taskset and bc.
set -euo pipefail
cd "$(dirname "$0")/.."
old_rev=${1:?usage: bash bench/ab.sh OLD_REV [NEW_REV]}
build() { # rev -> bin dir
  local dir=target/ab/$1
  git worktree add -f --detach "$dir/src" "$1" >/dev/null 2>&1 || git -C "$dir/src" checkout -q --detach "$1"
  CARGO_TARGET_DIR=$PWD/$dir/target cargo build --release --locked -q -p mediagate --manifest-path "$dir/src/Cargo.toml"
  echo "$PWD/$dir/target/release"
}
OLD=$(build "$old_rev")
if [ -n "${2:-}" ]; then NEW=$(build "$2"); else cargo build --release --locked -q -p mediagate; NEW=$PWD/target/release; fi
work=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null; rm -rf "$work"' EXIT
sim=127.0.0.1:19401
taskset -c 1 $NEW/mediagate simulate --listen $sim --time-scale 0 --key-prefix q >/dev/null 2>&1 &
declare -A pid key port
port[old]=19402; port[new]=19403
for v in old new; do
  b=$([ $v = old ] && echo $OLD || echo $NEW)
  key[$v]=$($b/mediagate keys create --account q --data-dir "$work/$v")
  printf 'listen: 127.0.0.1:%s\ndata_dir: %s\nworkers: 1\nadmin_token_env: Q_ADMIN\nupstreams:\n  cn-beijing: {base_url: "http://%s/cn-beijing", api_key_env: Q_UP}\nlimits: {max_in_flight_per_account: 100000000, requests_per_second_per_key: 1000000}\n' ${port[$v]} "$work/$v" $sim > $work/$v.yaml
  Q_UP=q-cn-beijing Q_ADMIN=q MEDIAGATE_LOG=warn taskset -c 0 $b/mediagate serve --config $work/$v.yaml >/dev/null 2>&1 &
  pid[$v]=$!
done
sleep 1.5
for v in old new; do
  curl -s -XPOST "http://127.0.0.1:${port[$v]}/admin/v1/accounts/q/top-up" -H 'Authorization: Bearer q' -H 'Content-Type: application/json' -d '{"amount": 1000000000000000}' >/dev/null
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer %s"\n' "'{\"model\":\"beta-image-2.0-pro_t2i\",\"prompt\":\"bench\",\"n\":1}'" "${key[$v]}" > $work/$v-sync.lua
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer %s"\n' "'{\"model\":\"alpha2.6-t2v_t2v\",\"prompt\":\"bench\",\"duration\":5}'" "${key[$v]}" > $work/$v-async.lua
  printf 'wrk.headers["Authorization"] = "Bearer %s"\n' "${key[$v]}" > $work/$v-read.lua
done
cpu() { awk '{print $14+$15}' /proc/$1/stat; }
run() { # v lane conns path
  local c0=$(cpu ${pid[$1]}); local out=$(taskset -c 1 wrk -t1 -c$3 -d${D:-5}s -s "$work/$1-$2.lua" "http://127.0.0.1:${port[$1]}$4" 2>&1)
  local c1=$(cpu ${pid[$1]}); local n=$(echo "$out" | awk '/requests in/{print $1}')
  echo "$2 $1 $(echo "$out" | awk '/Requests\/sec/{print $2}') $(echo "($c1-$c0)*10000/$n" | bc -l | cut -c1-6)" | tee -a "$work/runs"
}
for r in 1 2 3 4 5; do for v in old new; do run $v sync 16 /v1/images/generations; done; done
for r in 1 2 3 4 5; do for v in old new; do run $v async 64 /v1/videos/generations; done; done
for v in old new; do
  id=$(curl -s -XPOST "http://127.0.0.1:${port[$v]}/v1/videos/generations" -H "Authorization: Bearer ${key[$v]}" -H 'Content-Type: application/json' -d '{"model":"alpha2.6-t2v_t2v","prompt":"r","duration":5}' | sed 's/.*"task_id":"\([^"]*\)".*/\1/')
  echo $id > $work/$v.id
done
for r in 1 2 3 4 5; do for v in old new; do run $v read 16 /v1/tasks/$(cat $work/$v.id); done; done
echo
echo "medians (lane build req/s cpu-us-per-request):"
median() { sort -g | awk '{v[NR] = $1} END {print v[int((NR + 1) / 2)]}'; }
for lane in sync async read; do
  for v in old new; do
    runs=$(grep "^$lane $v " "$work/runs")
    echo "$lane $v $(echo "$runs" | cut -d' ' -f3 | median) $(echo "$runs" | cut -d' ' -f4 | median)"
  done
done
