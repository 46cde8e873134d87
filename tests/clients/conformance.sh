#!/usr/bin/env bash
# Runs the official MCP conformance suite (every server scenario, pending ones included)
# against `warden serve --http` on a free loopback port, and prints scenario counts.
# Usage: tests/clients/conformance.sh WARDEN_BINARY NPM_BIN_DIR
set -euo pipefail
bin=$1
npm_bin=$2
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
chmod 711 "$work"
trap 'kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; rm -rf "$work"' EXIT

SANDBOX_DATA_DIR="$work/data" SANDBOX_PYTHON=/usr/bin/python3 WARDEN_LOG=warn \
  "$bin" serve --http 127.0.0.1:0 2> "$work/server.log" &
pid=$!
url=
for _ in $(seq 100); do
  url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$work/server.log" | head -1 || true)
  [ -n "$url" ] && break
  sleep 0.1
done
[ -n "$url" ] || { cat "$work/server.log"; echo "warden serve --http did not start" >&2; exit 1; }

status=0
PATH="$npm_bin:$PATH" conformance server --url "$url" --suite all \
  --expected-failures "$here/conformance-baseline.yml" -o "$work/results" \
  > "$work/conformance.log" 2>&1 || status=$?
# The suite's own summary, reworded: its "Total: N passed, N failed" line counts checks,
# not scenarios, and must not be mistaken for this run's test summary.
total=$(grep -cE '^(✓|✗) ' "$work/conformance.log" || true)
baseline=$(grep -c '^  - ' "$here/conformance-baseline.yml" || true)
sed -n '/=== SUMMARY ===/,$p' "$work/conformance.log" | grep -v '^Total:' || true
if [ "$status" -eq 0 ]; then
  echo "MCP conformance against warden serve --http: $total server scenarios;" \
    "$((total - baseline)) pass cleanly; the other $baseline are the baseline" \
    "(tests/clients/conformance-baseline.yml: fixtures of the suite's reference server," \
    "or capabilities warden does not declare), and each of them still fails as listed"
fi
if [ "$status" -ne 0 ]; then
  cat "$work/conformance.log"
  echo "MCP conformance: unexpected failures or a stale baseline (see above)" >&2
fi
exit "$status"
