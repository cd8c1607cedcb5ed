#!/usr/bin/env bash
# Fuzzes the log-record reader and request admission with cargo fuzz (libFuzzer), each for SECONDS
# (60 by default): `bash fuzz/run.sh [log_record|admission] [SECONDS]`. Not part of CI. cargo fuzz needs
# nightly features; RUSTC_BOOTSTRAP lets the one stable toolchain here provide them. Findings land in
# fuzz/artifacts/<target>/.
set -euo pipefail
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
targets=("${1:-log_record}")
[ $# -eq 0 ] && targets=(log_record admission)
for target in "${targets[@]}"; do
  RUSTC_BOOTSTRAP=1 cargo fuzz run "$target" -- -max_total_time="${2:-60}"
done
