#!/usr/bin/env bash
# setup.sh installs what the project needs on a fresh Debian machine, idempotently:
# redis-server, chromium, protoc, kcat and jq (apt; chromium for the live page's browser test,
# protoc and kcat for the test that reads every topic with the shipped schema, jq for
# scripts/feed-mix), the chDB engine library
# (npm registry, cached outside the repo, checksum verified) and Go modules. A second run does
# no network work.
# It prints the environment to use as `export` lines on stdout; progress goes to stderr.
set -euo pipefail

CHDB_NPM_PKG="@chdb/lib-linux-x64-gnu"
CHDB_VERSION="26.7.3-stable.1"
# sha256 of libchdb.so inside the npm tarball above; checked on every run.
CHDB_SHA256="36ad4e999882821ef13cf2d0f52c93f48e6ee1b4498b35a201c23ce4b8d15bf5"
CACHE_DIR="${TALLY_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/tally}"
CHDB_DIR="$CACHE_DIR/chdb/$CHDB_VERSION"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

log() { echo "setup: $*" >&2; }

ensure_apt() {
  local missing=()
  for bin_pkg in "redis-server:redis-server" "redis-cli:redis-tools" "chromium:chromium" "protoc:protobuf-compiler" "kcat:kcat" "jq:jq"; do
    command -v "${bin_pkg%%:*}" >/dev/null 2>&1 || missing+=("${bin_pkg#*:}")
  done
  [ ${#missing[@]} -eq 0 ] && return 0
  log "installing Debian packages: ${missing[*]}"
  local sudo=""; [ "$(id -u)" -ne 0 ] && sudo="sudo"
  $sudo apt-get update -qq >&2
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >&2
  # Debian starts a system redis on 6379; the project runs its own, so stop that one.
  $sudo systemctl disable --now redis-server >/dev/null 2>&1 || true
}

ensure_chdb() {
  local lib="$CHDB_DIR/libchdb.so"
  if [ -f "$lib" ] && echo "$CHDB_SHA256  $lib" | sha256sum -c --status; then return 0; fi
  command -v npm >/dev/null 2>&1 || { log "npm is required to fetch the chDB library (apt-get install npm)"; exit 1; }
  log "fetching $CHDB_NPM_PKG@$CHDB_VERSION (about 178 MB) into $CHDB_DIR"
  local tmp; tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' RETURN
  (cd "$tmp" && npm pack --silent "$CHDB_NPM_PKG@$CHDB_VERSION" >&2)
  tar -xzf "$tmp"/*.tgz -C "$tmp" package/libchdb.so
  if ! echo "$CHDB_SHA256  $tmp/package/libchdb.so" | sha256sum -c --status; then
    log "chDB library checksum mismatch (want sha256 $CHDB_SHA256); refusing to install it"; exit 1
  fi
  mkdir -p "$CHDB_DIR"
  mv "$tmp/package/libchdb.so" "$lib.tmp"
  mv "$lib.tmp" "$lib"
}

ensure_go_modules() {
  # `go mod download` is a no-op when the module cache already holds everything.
  (cd "$ROOT" && for m in $(go list -m -f '{{.Dir}}' 2>/dev/null); do (cd "$m" && go mod download); done) >&2
}

ensure_apt
ensure_chdb
[ "${SETUP_SKIP_GO:-}" = "1" ] || ensure_go_modules
echo "export CHDB_LIB_PATH=$CHDB_DIR/libchdb.so"
