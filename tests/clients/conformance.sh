#!/usr/bin/env bash
# Runs the official MCP conformance suite (every server scenario, pending ones included)
# against `warden serve --http` over both of its routes, and prints scenario counts:
#   - TCP on a free loopback port, every request carrying the bearer token from the
#     server's token file (bearer.mjs);
#   - a UNIX socket, the client known by its uid (unix-socket.mjs).
# The suite's client takes only a URL, so a preloaded module gives its requests the
# token or the socket; a run without it is refused (401) and fails.
# Usage: tests/clients/conformance.sh WARDEN_BINARY NPM_BIN_DIR
set -euo pipefail
bin=$1
npm_bin=$(cd "$2" && pwd)
here=$(cd "$(dirname "$0")" && pwd)
work=$(mktemp -d)
chmod 711 "$work"
pid=
trap 'if [ -n "$pid" ]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi; rm -rf "$work"' EXIT

# Starts warden serve --http "$1" and waits for its URL line.
start() {
  SANDBOX_DATA_DIR="$work/data" SANDBOX_PYTHON=/usr/bin/python3 WARDEN_LOG=warn \
    "$bin" serve --http "$1" 2> "$work/server.log" &
  pid=$!
  for _ in $(seq 100); do
    grep -q 'http://[^ ]*/mcp' "$work/server.log" && return 0
    sleep 0.1
  done
  cat "$work/server.log"
  echo "warden serve --http $1 did not start" >&2
  exit 1
}

stop() {
  kill "$pid"
  wait "$pid" 2>/dev/null || true
  pid=
}

# Runs the suite against URL $1 with the preload $2; reports, returns its status.
suite() {
  local url=$1 preload=$2 route=$3 status=0
  PATH="$npm_bin:$PATH" WARDEN_NPM_MODULES="$npm_bin/.." NODE_OPTIONS="--import=$preload" \
    conformance server --url "$url" --suite all \
    --expected-failures "$here/conformance-baseline.yml" -o "$work/results-$route" \
    > "$work/conformance-$route.log" 2>&1 || status=$?
  # The suite's own summary, reworded: its "Total: N passed, N failed" line counts
  # checks, not scenarios, and must not be mistaken for this run's test summary.
  local total baseline
  total=$(grep -cE '^(✓|✗) ' "$work/conformance-$route.log" || true)
  baseline=$(grep -c '^  - ' "$here/conformance-baseline.yml" || true)
  echo "== $route"
  sed -n '/=== SUMMARY ===/,$p' "$work/conformance-$route.log" | grep -v '^Total:' || true
  if [ "$status" -eq 0 ]; then
    echo "MCP conformance against warden serve --http ($route): $total server scenarios;" \
      "$((total - baseline)) pass cleanly; the other $baseline are the baseline" \
      "(tests/clients/conformance-baseline.yml: fixtures of the suite's reference server," \
      "or capabilities warden does not declare), and each of them still fails as listed"
  else
    cat "$work/conformance-$route.log"
    echo "MCP conformance ($route): unexpected failures or a stale baseline (see above)" >&2
  fi
  return "$status"
}

status=0
start 127.0.0.1:0
url=$(grep -o 'http://127\.0\.0\.1:[0-9]*/mcp' "$work/server.log" | head -1)
WARDEN_TOKEN=$(cat "$work/data/http-token") suite "$url" "$here/bearer.mjs" "tcp-token" || status=$?
stop

mkdir -m 700 "$work/run"
start "unix:$work/run/warden.sock"
WARDEN_SOCKET="$work/run/warden.sock" suite http://localhost/mcp "$here/unix-socket.mjs" "unix-socket" \
  || status=$?
stop
exit "$status"
