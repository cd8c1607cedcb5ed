#!/usr/bin/env bash
# Builds release binaries and runs every bench scenario on this machine; the table is printed and written
# to bench/results/<date>.md. Needs taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."
# wrk measures maximum throughput (the in-repo generator is the fallback); it is a Debian package.
command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; } || echo "wrk not installed: using the in-repo generator" >&2
cargo build --release --locked -p mediagate -p mediagate-bench
exec taskset -c 1 target/release/mediagate-bench "$@"
