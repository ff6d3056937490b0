# Shared by the e2e runners (run.sh, structured_run.sh, schema_sample_run.sh); source it after
# setting E2E_NAME. Skips (77) when something is missing, except under CI=true where that fails.

skip_or_fail() {
  echo "${E2E_NAME:-e2e}: $1" >&2
  if [[ "${CI:-}" == "true" ]]; then exit 1; fi
  exit 77
}

require_node() {
  command -v node >/dev/null 2>&1 || skip_or_fail "node not found"
  command -v npm >/dev/null 2>&1 || skip_or_fail "npm not found"
}

# install_pinned DIR NAME: `npm ci` in DIR when node_modules is missing or older than the lock
# file, under a lock (NAME picks it) so concurrent ctest runs install once.
install_pinned() {
  local dir="$1" name="$2"
  local stamp="$dir/node_modules/.ladle-installed"
  local lock="${TMPDIR:-/tmp}/ladle-e2e-${name}-$(printf '%s' "$dir" | cksum | cut -d' ' -f1).lock"
  (
    flock 9
    if [[ ! -f "$stamp" || "$dir/package-lock.json" -nt "$stamp" ]]; then
      (cd "$dir" && npm ci --no-audit --no-fund --loglevel=error >&2) || exit 3
      touch "$stamp"
    fi
  ) 9>"$lock" || skip_or_fail "could not install the pinned packages in $dir (npm ci)"
}
