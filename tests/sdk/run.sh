#!/usr/bin/env bash
# Runs the SDK schema checks: run.sh <gen_writer_samples binary> <samples dir>
# Installs tests/sdk/node_modules from package-lock.json when it is missing or older than the
# lock file, writes the samples, and feeds them to the SDKs. Without node/npm it skips
# (exit 77), except under CI=true where a missing toolchain is a failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gen="$1"
out="$2"

skip_or_fail() {
  echo "sdk checks: $1" >&2
  if [[ "${CI:-}" == "true" ]]; then exit 1; fi
  exit 77
}

command -v node >/dev/null 2>&1 || skip_or_fail "node not found"
command -v npm >/dev/null 2>&1 || skip_or_fail "npm not found"

# npm ci replaces node_modules wholesale; a lock outside the tree keeps parallel test runs
# (several build directories share this source directory) from racing on it.
stamp="$here/node_modules/.ladle-installed"
lock="${TMPDIR:-/tmp}/ladle-sdk-npm-$(printf '%s' "$here" | cksum | cut -d' ' -f1).lock"
(
  flock 9
  if [[ ! -f "$stamp" || "$here/package-lock.json" -nt "$stamp" ]]; then
    if ! (cd "$here" && npm ci --no-audit --no-fund --loglevel=error >&2); then
      echo "npm ci failed" >&2
      exit 3
    fi
    touch "$stamp"
  fi
) 9>"$lock" || skip_or_fail "could not install the pinned SDKs (npm ci)"

rm -rf "$out"
"$gen" "$out"
exec node "$here/check_writers.mjs" "$out"
