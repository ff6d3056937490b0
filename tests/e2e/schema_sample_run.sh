#!/usr/bin/env bash
# End-to-end schema sample (issue 4, "End to end"): the built-in model (random weights)
# generates one output for each of a deterministic sample of MaskBench schemas that compile
# (bench/grammar/generate_bench: the real engine with the grammar mask and budget-aware
# completion), and an independent validator (ajv 8 + ajv-formats, pinned in
# tests/e2e/ajv/package-lock.json) checks every output against its schema. Any invalid output,
# truncated output or generation error fails the test; outputs ajv rejects only on keywords
# our compiler reported as approximated, and schemas ajv cannot compile, are counted and
# printed separately.
#
#   schema_sample_run.sh <generate_bench binary> [schemas (default 500)] [max tokens (default 32)]
#
# Environment: LADLE_SHARED / LADLE_CACHE / LADLE_TOKENIZER as everywhere;
# LADLE_SCHEMA_SAMPLE_OUT=FILE keeps the JSONL. Exits 77 (skipped) when node/npm, the
# tokenizer or the MaskBench archive are missing, except under CI=true where that fails.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
gen="$1"
schemas="${2:-500}"
max_tokens="${3:-32}"

E2E_NAME=schema_sample
source "$here/common.sh"
require_node
[[ -x "$gen" ]] || skip_or_fail "generate_bench not built: $gen"

root="$(cd "$here/../.." && pwd)"
shared="${LADLE_SHARED:-$root/../shared}"
archive="$shared/jsonschemabench/maskbench-dev.tar.zst"
[[ -f "$archive" ]] || skip_or_fail "MaskBench archive missing: $archive"
tokenizer="${LADLE_TOKENIZER:-}"
if [[ -z "$tokenizer" ]]; then
  tokenizer="${LADLE_CACHE:-$root/.cache}/tokenizers/deepseek-v3/tokenizer.json"
  [[ -f "$tokenizer" ]] || tokenizer="$shared/tokenizers/deepseek-v3/tokenizer.json"
fi
[[ -f "$tokenizer" ]] || skip_or_fail "tokenizer missing (run scripts/setup)"

ajv_dir="$here/ajv"
install_pinned "$ajv_dir" ajv

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
out="${LADLE_SCHEMA_SAMPLE_OUT:-$work/sample.jsonl}"

t0=$(date +%s.%N)
# The archive is unpacked into a private directory: parallel ctest runs never share one.
"$gen" --schemas "$schemas" --max-tokens "$max_tokens" --archive "$archive" --unpack-dir "$work/data" \
  --tokenizer "$tokenizer" --out "$out"
t1=$(date +%s.%N)
status=0
node "$here/schema_sample_validate.mjs" "$out" --print 20 || status=1
t2=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v c="$t2" 'BEGIN { printf "schema_sample: generation %.1f s, validation %.1f s\n", b - a, c - b }'
exit "$status"
