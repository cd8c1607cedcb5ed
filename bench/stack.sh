# Sourced by profile.sh, ab.sh and cost.sh: building a revision, a simulator in instant mode and gateways in front of it, pinned like
# bench/run.sh (servers on core 0, simulator and load on core 1), and the wrk scripts of the lanes.

# start_simulator BIN_DIR ADDR: with no cap on running tasks, which the lanes do not measure (a build from
# before capacity, which refuses the flag, is started without it).
# build REV: builds that revision's gateway in its own worktree and target dir (target/ab/REV); prints its
# bin dir.
build() {
  local dir=target/ab/$1
  git worktree add -f --detach "$dir/src" "$1" >/dev/null 2>&1 || git -C "$dir/src" checkout -q --detach "$1"
  CARGO_TARGET_DIR=$PWD/$dir/target cargo build --release --locked -q -p mediagate --manifest-path "$dir/src/Cargo.toml"
  echo "$PWD/$dir/target/release"
}

start_simulator() {
  if "$1/mediagate" simulate --help | grep -q -- --concurrency; then
    taskset -c 1 "$1/mediagate" simulate --listen "$2" --time-scale 0 --key-prefix bench --concurrency 1000000000 >/dev/null 2>&1 &
  else
    taskset -c 1 "$1/mediagate" simulate --listen "$2" --time-scale 0 --key-prefix bench >/dev/null 2>&1 &
  fi
}

# start_gateway BIN_DIR DATA_DIR PORT SIM_ADDR: starts a funded gateway on core 0 (one worker) as a job of
# the calling shell, and sets GATEWAY_PID and GATEWAY_KEY. Its admin token is `bench-admin`. Result copies
# are off unless BENCH_MIRROR=true: the lanes measure the request path, which copies never delay, and a
# backlog of copies left by one run would load the next (a build from before mirroring, which refuses the
# key, is started without it).
start_gateway() {
  local bin=$1 data=$2 port=$3 sim=$4
  GATEWAY_KEY=$("$bin/mediagate" keys create --account bench --data-dir "$data")
  printf 'listen: 127.0.0.1:%s\ndata_dir: %s\nworkers: 1\nadmin_token_env: BENCH_ADMIN\nupstreams:\n  cn-beijing: {base_url: "http://%s/cn-beijing", api_key_env: BENCH_UPSTREAM_KEY, concurrency: {default: 1000000000}}\nlimits: {max_in_flight_per_account: 100000000, requests_per_second_per_key: 1000000}\nresults: {mirror: %s}\n' \
    "$port" "$data" "$sim" "${BENCH_MIRROR:-false}" > "$data.yaml"
  for attempt in 1 2 3; do
    BENCH_UPSTREAM_KEY=bench-cn-beijing BENCH_ADMIN=bench-admin MEDIAGATE_LOG=warn \
      taskset -c 0 "$bin/mediagate" serve --config "$data.yaml" >/dev/null 2>&1 &
    GATEWAY_PID=$!
    sleep 0.3
    # A build from before capacity refuses `concurrency`, one from before mirroring `results`: each is
    # dropped in turn for a build that refuses the config.
    kill -0 "$GATEWAY_PID" 2>/dev/null && break
    case $attempt in
      1) sed -i 's/, concurrency: {default: 1000000000}//' "$data.yaml" ;;
      2) sed -i '/^results:/d' "$data.yaml" ;;
    esac
  done
  for _ in $(seq 50); do curl -s -o /dev/null "http://127.0.0.1:$port/healthz" && break; sleep 0.1; done
  # Something else answering on the port (a stray server from an earlier run) would otherwise be measured.
  kill -0 "$GATEWAY_PID" 2>/dev/null || { echo "mediagate did not start on port $port (in use?)" >&2; return 1; }
  curl -s -XPOST "http://127.0.0.1:$port/admin/v1/accounts/bench/top-up" -H 'Authorization: Bearer bench-admin' \
    -H 'Content-Type: application/json' -d '{"amount": 1000000000000000}' >/dev/null
}

# lane_body LANE: the JSON a POST lane sends: `sync` (POST /v1/images/generations) or `async`
# (POST /v1/videos/generations).
lane_body() {
  case $1 in
    sync) echo '{"model":"beta-image-2.0-pro_t2i","prompt":"bench","n":1}' ;;
    async) echo '{"model":"alpha2.6-t2v_t2v","prompt":"bench","duration":5}' ;;
  esac
}

# lane_script LANE KEY: the wrk script of lane `sync` or `async` (a POST of lane_body) or `read` (GET, the
# path names the task).
lane_script() {
  if [ "$1" = read ]; then printf 'wrk.headers["Authorization"] = "Bearer %s"\n' "$2"; return; fi
  printf 'wrk.method = "POST"\nwrk.body = %s\nwrk.headers["Content-Type"] = "application/json"\nwrk.headers["Authorization"] = "Bearer %s"\n' \
    "'$(lane_body "$1")'" "$2"
}

# lane_path LANE [TASK_ID]: where the lane's requests go (`read` reads TASK_ID: see submit_task).
lane_path() {
  case $1 in
    sync) echo /v1/images/generations ;;
    async) echo /v1/videos/generations ;;
    read) echo "/v1/tasks/$2" ;;
  esac
}

# lane_connections LANE: as bench/run.sh's saturating runs; writes that wait for an fsync share it, so the
# lanes that write (sync settles, async submits) need more requests in flight to saturate the gateway.
lane_connections() {
  if [ "$1" = read ]; then echo 16; else echo 64; fi
}

# wait_finished PORT KEY TASK_ID: waits (up to 30 s) until the task is terminal; the poller first asks
# about a task after a quarter of its model's expected run time (15 s at most).
wait_finished() {
  for _ in $(seq 300); do
    curl -s "http://127.0.0.1:$1/v1/tasks/$3" -H "Authorization: Bearer $2" |
      grep -qE '"status":"(success|failed|timeout|cancelled)"' && return
    sleep 0.1
  done
}

# submit_task PORT KEY: submits one async task, prints its id.
submit_task() {
  curl -s -XPOST "http://127.0.0.1:$1/v1/videos/generations" -H "Authorization: Bearer $2" \
    -H 'Content-Type: application/json' -d '{"model":"alpha2.6-t2v_t2v","prompt":"read","duration":5}' |
    sed 's/.*"task_id":"\([^"]*\)".*/\1/'
}
