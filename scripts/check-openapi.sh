#!/usr/bin/env bash
# Lints the webhook intake's API contract (docs/openapi.yaml) with Redocly CLI
# 2.77.0 from the npm registry, every recommended rule as an error
# (docs/redocly.yaml). Then lints a copy with one operationId taken out, which
# must fail: a linter that passes everything proves nothing.
#
# usage: bash scripts/check-openapi.sh [TOOLS_DIR]   (default build/tools; needs node + npm)
set -euo pipefail
cd "$(dirname "$0")/.."
tools=$(realpath -m "${1:-build/tools}")/redocly
version=2.77.0
command -v npm >/dev/null || { echo "check-openapi: needs Node.js and npm" >&2; exit 1; }
redocly=$tools/node_modules/.bin/redocly
if [[ ! -x $redocly ]] || ! "$redocly" --version 2>/dev/null | grep -qx "$version"; then
  mkdir -p "$tools"
  npm install --prefix "$tools" --no-audit --no-fund --silent "@redocly/cli@$version" >/dev/null
fi
lint() { "$redocly" lint --config docs/redocly.yaml --format stylish "$1" 2>&1 | grep -v "Node.js\|║\|╔\|╚"; }

lint docs/openapi.yaml
planted=$(mktemp --suffix=.yaml)
trap 'rm -f "$planted"' EXIT
sed '/operationId: recordPaymentWebhook/d' docs/openapi.yaml > "$planted"
if lint "$planted" >/dev/null; then
  echo "check-openapi: a contract without an operationId passed the lint" >&2
  exit 1
fi
echo "check-openapi: docs/openapi.yaml lint-clean (redocly $version, recommended-strict); a planted fault is caught"
