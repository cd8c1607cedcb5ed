#!/usr/bin/env bash
# Generated clients keep working: generates a typed client from a running gateway's /openapi.json with two
# standard generators (openapi-typescript for TypeScript, checked by `tsc --strict`; datamodel-code-generator
# for Python's pydantic), checks every file of examples/requests against each, and submits a job through
# each to success. Needs what tests/all.sh installs under target/tools: clients/node_modules (npm ci of
# tests/clients/typescript) and venv (pip install of tests/clients/python/requirements.txt).
# Usage: bash tests/clients/check.sh BASE_URL API_KEY [EXAMPLES_DIR]   (tests/clients.rs runs it against
# the demo; EXAMPLES_DIR defaults to examples/requests)
set -euo pipefail
root="$(cd "$(dirname "$0")/../.." && pwd)"
base=$1 key=$2 examples=${3:-$root/examples/requests}
tools="$root/target/tools"
work="$tools/clients/run"
rm -rf "$work" && mkdir -p "$work/ts" "$work/py"
curl -sSf "$base/openapi.json" -o "$work/openapi.json"

# A default makes a member optional in a request, not present (openapi-typescript assumes the response side),
# and an object of any members is any object, not `Record<string, never>`.
"$tools/clients/node_modules/.bin/openapi-typescript" "$work/openapi.json" -o "$work/ts/api.d.ts" \
  --default-non-nullable false --empty-objects-unknown >/dev/null
node "$root/tests/clients/typescript/examples.mjs" "$work/openapi.json" "$examples" "$work/ts/examples.ts"
cp "$root/tests/clients/typescript/submit.ts" "$root/tests/clients/typescript/tsconfig.json" "$work/ts/"
echo '{"type": "module"}' > "$work/ts/package.json"
(cd "$work/ts" && "$tools/clients/node_modules/.bin/tsc" -p tsconfig.json)
node "$work/ts/out/submit.js" "$base" "$key"

"$tools/venv/bin/datamodel-codegen" --input "$work/openapi.json" --input-file-type openapi \
  --output "$work/py/api.py" --output-model-type pydantic_v2.BaseModel --formatters builtin \
  --no-treat-dot-as-module --target-python-version 3.11 --disable-timestamp 2>/dev/null
"$tools/venv/bin/python" "$root/tests/clients/python/check_examples.py" "$work/py/api.py" "$examples"
PYTHONPATH="$root/tests/clients/python" "$tools/venv/bin/python" "$root/tests/clients/python/submit.py" \
  "$work/py/api.py" "$base" "$key"
