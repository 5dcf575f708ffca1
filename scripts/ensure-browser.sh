#!/usr/bin/env bash
# Make sure a Chromium the console's browser tests can drive is installed: Debian's `chromium`
# package, driven by the `playwright` Python package through `executable_path` (no
# `playwright install`: the browser comes from the system package manager).
#
# Safe to run any number of times: an installed browser is left alone. Never fails the build:
# where the package cannot be installed (not root and no sudo, no apt-get, no network) it says
# so, and the tests marked `browser` skip with the same reason.
#
# Environment:
#   PLANLOOP_TEST_CHROMIUM  path of a Chromium to use instead of the one on PATH
set -uo pipefail

found() {
  if [[ -n "${PLANLOOP_TEST_CHROMIUM:-}" && -x "${PLANLOOP_TEST_CHROMIUM}" ]]; then
    echo "$PLANLOOP_TEST_CHROMIUM"
    return 0
  fi
  command -v chromium || command -v chromium-browser
}

if browser="$(found)"; then
  echo "browser: $browser already installed"
  exit 0
fi
if ! command -v apt-get >/dev/null; then
  echo "browser: no chromium and no apt-get; the browser tests will skip (install chromium)"
  exit 0
fi
if [[ "$(id -u)" -eq 0 ]]; then
  run=()
elif command -v sudo >/dev/null && sudo -n true 2>/dev/null; then
  run=(sudo -n)
else
  echo "browser: no chromium, and installing it needs root; the browser tests will skip" \
    "(run: sudo apt-get install -y chromium)"
  exit 0
fi
echo "browser: installing chromium with apt-get"
log="${TMPDIR:-/tmp}/planloop-apt-chromium.log"
if "${run[@]}" apt-get update >"$log" 2>&1 \
  && DEBIAN_FRONTEND=noninteractive "${run[@]}" apt-get install -y --no-install-recommends \
    chromium >>"$log" 2>&1; then
  echo "browser: installed $(found)"
else
  echo "browser: apt-get could not install chromium (log: $log); the browser tests will skip"
fi
exit 0
