#!/usr/bin/env bash
# Every test, on both stores: the whole suite on the embedded store, then every integration test again on
# PostgreSQL (MEDIAGATE_TEST_STORE=postgres: each gateway the tests start gets a database of its own on a
# throwaway cluster the tests start, or on the server MEDIAGATE_TEST_DATABASE_URL names). Installs what is
# missing first: from Debian, the system's CA bundle, which the TLS tests need, PostgreSQL, Chromium, for the
# console's browser test, and Python's venv; from crates.io, s3s-fs (an S3-compatible server over a
# directory) under target/tools, for the mirroring tests; from PyPI, Playwright, which drives Chromium, in a
# venv there (the webhook tests install the Standard Webhooks library in one of their own); and the client
# generators of tests/clients (npm's openapi-typescript and tsc, PyPI's datamodel-code-generator).
set -euo pipefail
cd "$(dirname "$0")/.."
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
missing=()
[ -s /etc/ssl/certs/ca-certificates.crt ] || missing+=(ca-certificates)
if [ -z "${MEDIAGATE_TEST_DATABASE_URL:-}" ] && ! command -v initdb >/dev/null \
  && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  missing+=(postgresql)
fi
command -v chromium >/dev/null || missing+=(chromium)
# The generated TypeScript client (tests/clients) is made and compiled with Node.js and npm.
command -v npm >/dev/null || missing+=(nodejs npm)
# The venvs of the browser and webhook tests need Python with ensurepip (Debian's python3-venv).
python3 -c 'import ensurepip' 2>/dev/null || missing+=(python3 python3-venv)
if [ ${#missing[@]} -gt 0 ]; then
  $SUDO apt-get update -qq && $SUDO apt-get install -y -qq "${missing[@]}"
fi
if [ ! -x target/tools/bin/s3s-fs ]; then
  cargo install --quiet s3s-fs@0.14.1 --features binary --root target/tools
fi
if [ ! -x target/tools/venv/bin/python ] || ! target/tools/venv/bin/python -c 'import playwright' 2>/dev/null; then
  python3 -m venv target/tools/venv
  target/tools/venv/bin/pip install --quiet --disable-pip-version-check playwright==1.65.2
fi
# The generated clients' tools (tests/clients): openapi-typescript and tsc from npm, as locked; the Python
# generator from PyPI, pinned, in the same venv.
if ! cmp -s tests/clients/typescript/package-lock.json target/tools/clients/package-lock.json \
  || [ ! -x target/tools/clients/node_modules/.bin/tsc ]; then
  mkdir -p target/tools/clients
  cp tests/clients/typescript/package.json tests/clients/typescript/package-lock.json target/tools/clients/
  (cd target/tools/clients && npm ci --no-audit --no-fund --loglevel=error)
fi
if [ ! -x target/tools/venv/bin/datamodel-codegen ]; then
  target/tools/venv/bin/pip install --quiet --disable-pip-version-check -r tests/clients/python/requirements.txt
fi
cargo test --workspace --locked "$@"
MEDIAGATE_TEST_STORE=postgres cargo test --workspace --locked --test '*' "$@"
