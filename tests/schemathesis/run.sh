#!/usr/bin/env bash
# Runs schemathesis against the demo's /openapi.json: every route, with the checks the published API must
# pass. Not part of CI (it takes minutes): `bash tests/schemathesis/run.sh [MAX_EXAMPLES]`. Installs
# schemathesis into a venv under target/ (PyPI), builds the release binary, starts `mediagate demo` on a
# fresh data dir and a free loopback port, and stops it when done.
set -euo pipefail
cd "$(dirname "$0")/../.."
venv=target/schemathesis-venv
if [ ! -x "$venv/bin/st" ]; then
  python3 -m venv "$venv"
  "$venv/bin/pip" install --quiet 'schemathesis==4.*'
fi
cargo build --release --locked -p mediagate
data=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
key=schemathesis-key-0123456789
MEDIAGATE_ADMIN_TOKEN=unused target/release/mediagate demo --listen "127.0.0.1:$port" --data-dir "$data" \
  --api-key "$key" --time-scale 0 >/dev/null &
demo=$!
trap 'kill $demo 2>/dev/null; rm -rf "$data"' EXIT
for _ in $(seq 100); do curl -fs "http://127.0.0.1:$port/readyz" >/dev/null && break; sleep 0.1; done
"$venv/bin/st" run "http://127.0.0.1:$port/openapi.json" \
  --header "Authorization: Bearer $key" \
  --checks not_a_server_error,status_code_conformance,content_type_conformance,response_schema_conformance,unsupported_method,allow_header_conformance \
  --max-examples "${1:-50}" \
  --workers 2
