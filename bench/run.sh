#!/usr/bin/env bash
# Builds release binaries and runs every bench scenario on this machine; the table is printed and written
# to bench/results/<date>.md. Needs taskset (util-linux).
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release --locked -p mediagate -p mediagate-bench
exec taskset -c 1 target/release/mediagate-bench "$@"
