#!/usr/bin/env bash
# Real agents and frameworks against `ladle serve`, unchanged (issue 12 §2):
#   run.sh <ladle binary>
# Installs the pinned packages (package-lock.json: Claude Code, Codex CLI, the Vercel AI SDK,
# LangChain JS), starts one `ladle serve` on a random loopback port with a tiny built-in model
# (bench/serve/tiny_model.json, so Claude Code's ~20K-token system prompt prefills in seconds on 2 cores)
# whose answers end on their own: its weights are random, so an EOS logit bias (--eos-logit-bias
# 10: about 10 tokens on average) stands in for a real model's end of turn, and a 128-token cap
# bounds the rare long one (agents ask for 32,000). Then it runs:
#   * Claude Code: `claude -p` with ANTHROPIC_BASE_URL, stock settings;
#   * Codex CLI: `codex exec` with a custom model provider (wire_api = "responses");
#   * frameworks.mjs: the AI SDK (chat, responses, anthropic) and LangChain (openai, anthropic).
# Every process has a deadline; the server is stopped by PID. Exits 77 (skipped) when node/npm
# or the tokenizer are missing, except under CI=true where that is a failure.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ladle="$1"

E2E_NAME="agents e2e"
source "$here/../common.sh"
require_node
install_pinned "$here" agents

work="$(mktemp -d)"
pids=()
cleanup() {
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do wait "$pid" 2>/dev/null || true; done
  rm -rf "$work"
}
trap cleanup EXIT

key="agents-$RANDOM$RANDOM"
log="$work/serve.log"
LADLE_API_KEYS="$key" "$ladle" serve --port 0 --model-config "$here/../../../bench/serve/tiny_model.json" --max-tokens-cap 128 --eos-logit-bias 10 \
  --cost-model "$work/cost_model.json" --log-format json >"$log" 2>&1 &
server_pid=$!
pids+=("$server_pid")
port=""
for _ in $(seq 1 1200); do
  port="$(grep -o 'server.listening host=[^ ]* port=[0-9]*' "$log" | head -1 | sed 's/.*port=//')" || true
  [[ -n "$port" ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then
    cat "$log" >&2
    if grep -qi "tokenizer" "$log" && grep -qi "no such file\|cannot open\|not found" "$log"; then
      skip_or_fail "tokenizer missing (run scripts/setup)"
    fi
    echo "agents e2e: server exited during start-up" >&2
    exit 1
  fi
  sleep 0.25
done
[[ -n "$port" ]] || { echo "agents e2e: server did not start within 300 s" >&2; exit 1; }
base="http://127.0.0.1:$port"
echo "agents e2e: ladle serve on $base"
status=0

# Agents keep state under HOME; each gets an empty one, and nothing phones home.
export DISABLE_TELEMETRY=1 DISABLE_ERROR_REPORTING=1 DISABLE_AUTOUPDATER=1 CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1
export NO_UPDATE_NOTIFIER=1

# ---- Claude Code ----
mkdir -p "$work/claude-home" "$work/claude-cwd"
t0=$(date +%s)
if (cd "$work/claude-cwd" && HOME="$work/claude-home" ANTHROPIC_BASE_URL="$base" ANTHROPIC_API_KEY="$key" \
    ANTHROPIC_MODEL=ladle ANTHROPIC_SMALL_FAST_MODEL=ladle ANTHROPIC_DEFAULT_HAIKU_MODEL=ladle \
    ANTHROPIC_DEFAULT_SONNET_MODEL=ladle ANTHROPIC_DEFAULT_OPUS_MODEL=ladle \
    timeout 300 "$here/node_modules/.bin/claude" -p "Say hello in five words." --model ladle \
      --output-format json >"$work/claude.json" 2>"$work/claude.err" </dev/null); then
  if node -e '
    const r = JSON.parse(require("fs").readFileSync(process.argv[1], "utf8"));
    if (r.is_error) throw new Error("is_error: " + JSON.stringify(r).slice(0, 400));
    if (typeof r.result !== "string") throw new Error("no result: " + JSON.stringify(r).slice(0, 400));
  ' "$work/claude.json"; then
    echo "ok   Claude Code (claude -p, ANTHROPIC_BASE_URL) answered ($(( $(date +%s) - t0 )) s)"
  else
    echo "FAIL Claude Code: bad result"; head -c 2000 "$work/claude.json"; status=1
  fi
else
  echo "FAIL Claude Code: exit $? after $(( $(date +%s) - t0 )) s"; tail -20 "$work/claude.err"; head -c 2000 "$work/claude.json"; status=1
fi

# ---- Codex CLI ----
mkdir -p "$work/codex-home" "$work/codex-cwd"
cat >"$work/codex-home/config.toml" <<EOF
model = "ladle"
model_provider = "ladle"
[model_providers.ladle]
name = "Ladle"
base_url = "$base/v1"
env_key = "LADLE_TEST_KEY"
wire_api = "responses"
request_max_retries = 0
stream_max_retries = 0
EOF
t0=$(date +%s)
if (cd "$work/codex-cwd" && HOME="$work/codex-home" CODEX_HOME="$work/codex-home" LADLE_TEST_KEY="$key" \
    timeout 300 "$here/node_modules/.bin/codex" exec --skip-git-repo-check --sandbox read-only \
      "Say hello in five words." >"$work/codex.out" 2>"$work/codex.err" </dev/null); then
  echo "ok   Codex CLI (codex exec, custom responses provider) answered ($(( $(date +%s) - t0 )) s)"
else
  echo "FAIL Codex CLI: exit $? after $(( $(date +%s) - t0 )) s"; tail -30 "$work/codex.err"; tail -5 "$work/codex.out"; status=1
fi

# ---- Vercel AI SDK and LangChain JS ----
timeout 600 node "$here/frameworks.mjs" "$base" "$key" || status=1

# Every request the agents made is in the log; none may have been answered 5xx.
if grep -o '"msg":"request.done[^"]*status=5[0-9][0-9]' "$log" | head -3 | grep -q .; then
  echo "FAIL a request was answered 5xx:"; grep -o '"msg":"request.done[^"]*status=5[0-9][0-9][^"]*' "$log" | head -5; status=1
fi
kill -TERM "$server_pid"
if wait "$server_pid"; then echo "ok   server drained and exited 0"; else echo "FAIL server exit code $?"; status=1; fi
pids=()
if [[ "$status" != 0 ]]; then
  echo "---- server log: rejected requests ----" >&2
  grep -o '"msg":"request.rejected[^"]*"' "$log" | tail -20 >&2 || true
fi
exit "$status"
