#!/usr/bin/env bash
# Builds warden's MCP Bundle (.mcpb: the one-click install format of desktop MCP clients)
# around a Linux warden binary: packaging/manifest.json with this crate's version, the
# binary at server/warden; the manifest is validated and the bundle packed with the
# pinned @anthropic-ai/mcpb (tests/clients/package.json; .ci/run installs it).
#
#   tools/bundle.sh [BINARY] [OUT]     defaults: target/release/warden, target/warden.mcpb
#
# Beside the bundle it writes OUT's name with .server.json: the entry for the MCP Registry
# (packaging/server.json with the version, the bundle's SHA-256 and WARDEN_BUNDLE_URL, the
# address the bundle is published at).
#
# MCPB_BIN names the directory of the mcpb command (default: target/ci-npm's, else PATH).
set -euo pipefail
cd "$(dirname "$0")/.."

binary="${1:-target/release/warden}"
out="${2:-target/warden.mcpb}"
die() { echo "bundle: $*" >&2; exit 1; }
[ -x "$binary" ] || die "no warden binary at $binary (cargo build --release)"
mcpb_dir="${MCPB_BIN:-target/ci-npm/node_modules/.bin}"
if [ -x "$mcpb_dir/mcpb" ]; then
  export PATH="$mcpb_dir:$PATH"
fi
command -v mcpb >/dev/null || die "mcpb is missing (bash .ci/run installs it into target/ci-npm)"

version="$(sed -n 's/^version = "\(.*\)"$/\1/p' Cargo.toml | head -1)"
[ -n "$version" ] || die "no version in Cargo.toml"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT
mkdir -p "$stage/server"
sed "s/@VERSION@/$version/" packaging/manifest.json > "$stage/manifest.json"
cp "$binary" "$stage/server/warden"
chmod 755 "$stage/server/warden"
cp LICENSE* "$stage/" 2>/dev/null || true
mcpb validate "$stage/manifest.json"
mkdir -p "$(dirname "$out")"
rm -f "$out"
mcpb pack "$stage" "$out" >/dev/null
sha="$(sha256sum "$out" | cut -d' ' -f1)"
url="${WARDEN_BUNDLE_URL:-https://example.invalid/warden-$version.mcpb}"
sed -e "s/@VERSION@/$version/g" -e "s/@SHA256@/$sha/" -e "s|@URL@|$url|" \
  packaging/server.json > "${out%.mcpb}.server.json"
echo "bundle: $out (warden $version, sha256 $sha) and ${out%.mcpb}.server.json"
