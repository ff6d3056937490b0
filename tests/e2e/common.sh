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

# start_ladle BIN LOG [serve flags...]: starts `BIN serve --port 0 FLAGS` with its output in LOG and
# waits up to 60 s for the port it logs; sets $port and $pid and appends the pid to the caller's
# `pids` array (its cleanup stops them). A missing tokenizer skips (fails under CI=true).
start_ladle() {
  local bin="$1" log="$2"; shift 2
  "$bin" serve --port 0 "$@" >"$log" 2>&1 &
  pid=$!
  pids+=("$pid")
  for _ in $(seq 1 600); do
    port=$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$log" | head -1 | sed 's/.*port=//') || true
    [[ -n "$port" ]] && return 0
    if ! kill -0 "$pid" 2>/dev/null; then
      cat "$log" >&2
      if grep -q "tokenizer" "$log" && grep -qi "no such file\|cannot open\|not found" "$log"; then
        skip_or_fail "tokenizer missing (run scripts/setup)"
      fi
      echo "${E2E_NAME:-e2e}: server exited during start-up" >&2
      exit 1
    fi
    sleep 0.1
  done
  echo "${E2E_NAME:-e2e}: server did not start within 60 s" >&2
  exit 1
}
