#!/usr/bin/env bash
# `ladle kv` end to end (issue 13), on an fs:DIR store and an ec:10+2:D0,...,D11 store (12
# directories): put/get of 0 B, 1 B, 112 KiB, 1 MiB and 1 MiB + 1 B values byte-identical, the
# four ways to name the store (--store after or before the subcommand, $LADLE_KV_STORE) and both
# ways in and out (stdin/stdout, --in/--out); match on a chain of keys (stdin too), stopping at
# the first absent key and at a hole left by `rm`; a miss exits 2 with nothing on stdout; bad
# keys, bad URIs and bad flags exit non-zero (never 2) with a message on stderr; stat --json
# counts the objects and its used_bytes equal the chunk files on disk; a TTL'd block expires and
# `gc` evicts it and collects an overwritten block's old stripe; a short `bench`.
# fs: a corrupted chunk file is a clean miss and fsck drops it (exit 3, then 0).
# ec: a `ladle kv put` is a one-block stripe: its data chunk on domain 0, parity on 10 and 11
# (docs/kvcache.md, "A Put of one block ... is stored three times"), so those are the domains to
# lose. Two lost (files deleted on d0, bytes flipped on d10): every get exact, fsck repairs
# (exit 0) and rewrites the chunks byte-identical to the originals. Three lost (d0 deleted, d10
# flipped, d11 truncated): every get is a clean miss (exit 2, empty stdout, never other bytes),
# fsck exits 3 naming them unrecoverable and drops them, match follows. 15-25 s on 2 busy cores:
# about 75 `ladle kv` processes, and each ec one opens 12 RocksDB indexes (0.15-0.4 s).
set -euo pipefail
LADLE=${1:?usage: kv_cli_run.sh path/to/ladle}
[[ -x "$LADLE" ]] || { echo "kv cli: $LADLE is not an executable" >&2; exit 1; }
unset LADLE_KV_STORE
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
T0=$(date +%s%N)

checks=0
fails=0
ok() { checks=$((checks + 1)); echo "ok   $*"; }
bad() { checks=$((checks + 1)); fails=$((fails + 1)); echo "FAIL $*"; }
errtail() { tr '\n' ' ' <"$work/err" | cut -c1-300; }
# kv ARGS...: one `ladle kv` call, bounded; sets $rc, stdout in $work/out, stderr in $work/err.
# KV_ENV=URI kv ... passes the store in $LADLE_KV_STORE instead. A domain is marked down after
# --domain-timeout-ms without an answer (500 ms by default, counted from the process's start):
# a loaded CI machine can stall a fresh process that long, and a domain marked down turns an
# exact read into a miss, so the checks here give it 10 s.
kv() {
  rc=0
  env ${KV_ENV:+"LADLE_KV_STORE=$KV_ENV"} timeout 30 "$LADLE" kv --domain-timeout-ms 10000 "$@" \
    >"$work/out" 2>"$work/err" || rc=$?
}
want_rc() {  # want_rc N WHAT...: the last call exited N
  local want=$1; shift
  if [[ $rc -eq $want ]]; then ok "$*"; else bad "$* (exit $rc, want $want; stderr: $(errtail))"; fi
}
want_out() {  # want_out TEXT WHAT...: the last call exited 0 and printed exactly TEXT
  local want=$1; shift
  local got; got=$(cat "$work/out")
  if [[ $rc -eq 0 && "$got" == "$want" ]]; then ok "$*"; else bad "$* (exit $rc, stdout '$got', want '$want'; stderr: $(errtail))"; fi
}
want_miss() {  # the last call was a clean miss: exit 2, nothing on stdout, a word on stderr
  if [[ $rc -eq 2 && ! -s "$work/out" && -s "$work/err" ]]; then ok "$*"
  else bad "$* (exit $rc, want 2; $(wc -c <"$work/out") bytes on stdout; stderr: $(errtail))"; fi
}
want_error() {  # a refused call: exit non-zero and not 2 (not a miss), nothing on stdout, stderr says why
  if [[ $rc -ne 0 && $rc -ne 2 && ! -s "$work/out" && -s "$work/err" ]]; then ok "$* (exit $rc: $(head -1 "$work/err"))"
  else bad "$* (exit $rc, want an error; $(wc -c <"$work/out") bytes on stdout; stderr: $(errtail))"; fi
}
want_same() {  # want_same EXPECTED GOT WHAT...: the last call exited 0 and GOT holds EXPECTED's bytes
  local exp=$1 got=$2; shift 2
  if [[ $rc -eq 0 ]] && cmp -s "$exp" "$got"; then ok "$*"
  else bad "$* (exit $rc; $(wc -c 2>/dev/null <"$got" || echo no) bytes, want $(wc -c <"$exp"); stderr: $(errtail))"; fi
}
newkey() { od -An -tx1 -N16 /dev/urandom | tr -d ' \n'; }
# Chunk files of one target directory: DIR/ab/<32 hex> (one fan-out level, docs/kvcache.md).
chunks() { { find "$1"/?? -maxdepth 1 -type f ! -name '.tmp.*' 2>/dev/null || true; } | sort; }
nchunks() { chunks "$1" | wc -l | tr -d ' '; }
disk_bytes() { chunks "$1" | xargs -r -d '\n' stat -c %s | awk '{s += $1} END {print s + 0}'; }
field() { { grep -o "\"$1\": [0-9]*" "$work/out" || true; } | awk '{print $2}' | paste -sd' ' -; }
flip() {  # flip FILE: invert every bit of the middle byte
  local f=$1 off b
  off=$(($(stat -c %s "$f") / 2))
  b=$(od -An -tu1 -j "$off" -N1 "$f" | tr -d ' ')
  printf "\\$(printf '%03o' $((b ^ 255)))" | dd of="$f" bs=1 seek="$off" conv=notrunc status=none
}
# A lost domain: its chunk files deleted, each with a flipped byte, or each cut to half its length.
lose_delete() { chunks "$1" | xargs -r -d '\n' rm -f; }
lose_flip() { local f; while IFS= read -r f; do flip "$f"; done < <(chunks "$1"); }
lose_truncate() { local f; while IFS= read -r f; do truncate -s $(($(stat -c %s "$f") / 2)) "$f"; done < <(chunks "$1"); }
# fsck_field NAME: a number from fsck's "objects N  ok N  repaired N  unrecoverable N" (-1 if absent).
fsck_field() { awk -v f="$1" '{for (i = 1; i < NF; ++i) if ($i == f) { print $(i + 1); n++ }} END {if (!n) print -1}' "$work/out"; }

data="$work/data"
mkdir -p "$data"
: >"$data/v0"
head -c 1 /dev/urandom >"$data/v1"
head -c $((112 * 1024)) /dev/urandom >"$data/v112k"
head -c $((1024 * 1024)) /dev/urandom >"$data/v1m"
head -c $((1024 * 1024 + 1)) /dev/urandom >"$data/v1m1"  # past get's first 1 MiB buffer
printf 'Z' >"$data/v1b"                                    # the 1-byte value rewritten
cmp -s "$data/v1" "$data/v1b" && printf 'Y' >"$data/v1b"
VALUES=(v0 v1 v112k v1m v1m1)
value_bytes=$((1 + 112 * 1024 + 2 * 1024 * 1024 + 1))

# --- bad URIs and arguments (no store is opened) -----------------------------------------------
K=$(newkey)
ec11="ec:10+2:$(for i in $(seq 0 10); do printf '%s/bad%d,' "$work" "$i"; done)"
for uri in "bogus:$work/x" "fs:" "${ec11%,}" "ec:10-2:$work/a" "ec:0+2:$work/a,$work/b" "ec:10+2"; do
  kv get --store "$uri" "$K"
  label=${uri//$work/\$T}
  [[ ${#label} -gt 40 ]] && label="${label:0:20}... (11 directories)"
  want_error "malformed URI '$label' refused"
done
kv get "$K"
want_error "no --store and no \$LADLE_KV_STORE refused"
kv
want_error "\`ladle kv\` without a subcommand refused"
mkdir -p "$work/fs"
FS="fs:$work/fs/store"
for key in xyz "${K:1}" "${K}0" "g${K:1}"; do
  kv get --store "$FS" "$key"
  want_error "get of malformed key '$key' refused"
done
kv put --store "$FS" "$K" "$K" <"$data/v1"
want_error "put of two keys refused"
kv put --store "$FS" --class batch "$K" <"$data/v1"
want_error "put --class batch refused"
kv rm --store "$FS" zz
want_error "rm of a malformed key refused"
kv match --store "$FS"
want_error "match without keys refused"
kv put --store "$FS" --in "$work/no-such-file" "$K"
want_error "put --in of a missing file refused"

# --- the suite both stores pass ----------------------------------------------------------------
# suite NAME URI DIR...: DIR... are the store's target directories.
suite() {
  local name=$1 S=$2; shift 2
  local dirs=("$@") i k t_ttl tkey nobj total v
  local -A key
  local P="$name:"
  mkdir -p "$work/$name"
  local out="$work/$name/got"

  # A block that expires: agent class with a 1 s TTL. Checked after the rest has run.
  tkey=$(newkey)
  t_ttl=$(date +%s%N)
  kv put --store "$S" --class agent --ttl-agent 1 "$tkey" <"$data/v1"
  want_rc 0 "$P put --class agent --ttl-agent 1"

  # Put: stdin, $LADLE_KV_STORE, --in, --store before the subcommand, stdin.
  for v in "${VALUES[@]}"; do key[$v]=$(newkey); done
  kv put --store "$S" "${key[v0]}" <"$data/v0"
  want_rc 0 "$P put 0 B from stdin"
  KV_ENV=$S kv put "${key[v1]}" <"$data/v1"
  want_rc 0 "$P put 1 B with the store from \$LADLE_KV_STORE"
  kv put --store "$S" --in "$data/v112k" "${key[v112k]}" </dev/null
  want_rc 0 "$P put 112 KiB with --in"
  kv --store "$S" put "${key[v1m]}" <"$data/v1m"
  want_rc 0 "$P put 1 MiB with --store before the subcommand"
  kv put --store "$S" "${key[v1m1]}" <"$data/v1m1"
  want_rc 0 "$P put 1 MiB + 1 B"

  kv get --store "$S" "${key[v0]}"
  want_same "$data/v0" "$work/out" "$P get 0 B: exact"
  KV_ENV=$S kv get "${key[v1]}"
  want_same "$data/v1" "$work/out" "$P get 1 B with \$LADLE_KV_STORE: exact"
  rm -f "$out"
  kv get --store "$S" -o "$out" "${key[v112k]}"
  if [[ -s "$work/out" ]]; then bad "$P get --out wrote to stdout too"; fi
  want_same "$data/v112k" "$out" "$P get 112 KiB with --out: exact"
  kv --store "$S" get "${key[v1m]}"
  want_same "$data/v1m" "$work/out" "$P get 1 MiB with --store before the subcommand: exact"
  kv get --store "$S" "${key[v1m1]}"
  want_same "$data/v1m1" "$work/out" "$P get 1 MiB + 1 B (past the first buffer): exact"

  # Match on a chain of 6 keys, in order; the CLI puts each block alone.
  local chain=()
  for i in 0 1 2 3 4 5; do
    chain+=("$(newkey)")
    head -c $((100 + RANDOM % 8000)) /dev/urandom >"$work/$name/c$i"
    kv put --store "$S" "${chain[i]}" <"$work/$name/c$i"
    [[ $rc -eq 0 ]] || bad "$P put chain block $i (exit $rc: $(errtail))"
  done
  kv match --store "$S" "${chain[@]}"
  want_out 6 "$P match of the 6-key chain = 6"
  printf '%s\n' "${chain[@]}" | kv match --store "$S" -
  want_out 6 "$P match of the chain from stdin (-) = 6"
  local absent; absent=$(newkey)
  kv match --store "$S" "${chain[0]}" "${chain[1]}" "${chain[2]}" "$absent" "${chain[3]}"
  want_out 3 "$P match stops at an absent key = 3"
  kv match --store "$S" "$absent" "${chain[@]}"
  want_out 0 "$P match with an absent first key = 0"
  kv rm --store "$S" "${chain[3]}"
  want_rc 0 "$P rm of the chain's 4th key"
  printf '%s\n' "${chain[@]}" | kv match --store "$S" -
  want_out 3 "$P match after rm of key 3 stops at the hole = 3"
  kv match --store "$S" "${chain[4]}" "${chain[5]}"
  want_out 2 "$P match of the keys after the hole = 2 (rm took only its key)"
  kv rm --store "$S" "${chain[3]}" "$absent"
  want_rc 0 "$P rm of absent keys is idempotent (exit 0)"
  kv get --store "$S" "${chain[3]}"
  want_miss "$P get of the removed key: miss"
  rm -f "$out"
  kv get --store "$S" -o "$out" "$absent"
  want_miss "$P get of a never-written key: miss"
  [[ ! -e "$out" ]] && ok "$P a miss with --out creates no file" || bad "$P a miss with --out created $out"

  # stat: 5 values + 5 chain blocks + the TTL'd block; used_bytes are the chunk files on disk.
  nobj=11
  kv stat --store "$S" --json
  local objs used want_objs="" want_used="" d
  objs=$(field objects)
  used=$(field used_bytes)
  for i in "${!dirs[@]}"; do
    d=${dirs[i]}
    if [[ ${#dirs[@]} -eq 1 || $i -eq 0 || $i -ge 10 ]]; then want_objs+=" $nobj"; else want_objs+=" 0"; fi
    want_used+=" $(disk_bytes "$d")"
  done
  want_objs=${want_objs# }
  want_used=${want_used# }
  if [[ $rc -eq 0 && "$objs" == "$want_objs" ]]; then ok "$P stat --json objects per target: $objs"
  else bad "$P stat --json objects per target '$objs', want '$want_objs' (exit $rc)"; fi
  if [[ "$used" == "$want_used" ]]; then ok "$P stat --json used_bytes = the chunk files' bytes on disk ($(echo "$used" | cut -d' ' -f1) B on target 0)"
  else bad "$P stat --json used_bytes '$used', chunk files on disk '$want_used'"; fi
  total=$(($(echo "$used" | cut -d' ' -f1)))
  local live=$((value_bytes + 1)); for i in 0 1 2 4 5; do live=$((live + $(stat -c %s "$work/$name/c$i"))); done
  if ((total >= live && total <= live + nobj * 1024)); then ok "$P stat: target 0 holds $total B for $live B of values ($nobj headers)"
  else bad "$P stat: target 0 holds $total B for $live B of values"; fi
  grep -q '"healthy": true' "$work/out" && ok "$P stat --json healthy" || bad "$P stat --json not healthy: $(cat "$work/out")"
  kv stat --store "$S"
  if [[ $rc -eq 0 ]] && grep -q 'healthy yes' "$work/out" && [[ $(grep -c "^[0-9]" "$work/out") -eq ${#dirs[@]} ]]; then
    ok "$P stat (text): one row per target, healthy"
  else bad "$P stat (text) exit $rc: $(tr '\n' '|' <"$work/out")"; fi

  # Rewrite the 1-byte block: the new bytes read back; the old stripe is garbage for gc.
  kv put --store "$S" "${key[v1]}" <"$data/v1b"
  want_rc 0 "$P put again over the 1-byte key"
  kv get --store "$S" "${key[v1]}"
  want_same "$data/v1b" "$work/out" "$P get after the rewrite: the new bytes"

  # TTL + gc: 1.3 s after its put the TTL'd block is a miss, and gc evicts exactly it.
  local waited=$((($(date +%s%N) - t_ttl) / 1000000))
  ((waited < 1300)) && sleep "$(printf '0.%03d' $((1300 - waited)))"
  kv get --store "$S" "$tkey"
  want_miss "$P get of the expired (--ttl-agent 1) block: miss"
  kv gc --store "$S"
  want_out "evicted 1" "$P gc evicts the expired block (evicted 1)"
  nobj=10
  kv stat --store "$S" --json
  objs=$(field objects)
  want_objs=$(echo "$want_objs" | sed "s/\b11\b/$nobj/g")
  if [[ "$objs" == "$want_objs" ]]; then ok "$P after gc: $nobj objects per data/parity target (TTL'd block and the rewritten stripe gone)"
  else bad "$P after gc objects per target '$objs', want '$want_objs'"; fi

  # bench: a quick closed loop on its own random keys, removed afterwards.
  kv bench --store "$S" --blocks 32 --size 4096 --depth 4 --chain 32 --match-reps 5
  if [[ $rc -eq 0 ]] && awk '$1 ~ /^(put|get|match)$/ { n++; if ($8 != "0") e++ } END { exit !(n == 3 && e == 0) }' "$work/out"; then
    ok "$P bench: put/get/match rows, 0 errors"
  else bad "$P bench exit $rc: $(tr '\n' '|' <"$work/out") $(errtail)"; fi
  kv stat --store "$S" --json
  [[ "$(field objects)" == "$want_objs" ]] && ok "$P bench left no blocks behind" || bad "$P bench left objects: $(field objects)"

  # Hand the keys to the store-specific part.
  KEYS_V0=${key[v0]} KEYS_V1=${key[v1]}
  SUITE_KEYS=("${key[v0]}" "${key[v1]}" "${key[v112k]}" "${key[v1m]}" "${key[v1m1]}")
  SUITE_CHAIN=("${chain[0]}" "${chain[1]}" "${chain[2]}" "${chain[4]}" "${chain[5]}")
}

# --- fs:DIR -------------------------------------------------------------------------------------
FSDIR="$work/fs/store"
suite fs "$FS" "$FSDIR"
# A corrupted chunk file is a clean miss; fsck drops it (exit 3), then finds nothing (exit 0).
# The 0-byte and 1-byte blocks' files are the only ones of their sizes (chain blocks are >= 100 B).
smallest=$(chunks "$FSDIR" | xargs -r -d '\n' stat -c '%s %n' | sort -n | sed -n '1,2p')
f_empty=$(echo "$smallest" | sed -n 1p | cut -d' ' -f2)
f_one=$(echo "$smallest" | sed -n 2p | cut -d' ' -f2)
s_empty=$(stat -c %s "$f_empty" 2>/dev/null || echo 0); s_one=$(stat -c %s "$f_one" 2>/dev/null || echo 0)
if ((s_empty > 0 && s_one == s_empty + 1)); then
  ok "fs: the 0 B and 1 B blocks' chunk files are $s_empty and $s_one B"
  flip "$f_empty"
  truncate -s $((s_one / 2)) "$f_one"
else bad "fs: the two smallest chunk files are $s_empty and $s_one B, want n and n + 1"; fi
kv get --store "$FS" "$KEYS_V0"
want_miss "fs: get of a block whose file has a flipped byte: clean miss"
kv fsck --store "$FS"
if [[ $rc -eq 3 ]] && u=$(fsck_field unrecoverable) && ((u >= 1 && u <= 2)); then ok "fs: fsck finds the damaged blocks unrecoverable (exit 3: $(cat "$work/out"))"
else bad "fs: fsck exit $rc, want 3 with 1-2 unrecoverable: $(cat "$work/out") $(errtail)"; fi
kv get --store "$FS" "$KEYS_V1"
want_miss "fs: get of the block whose file was truncated: clean miss"
kv fsck --store "$FS"
if [[ $rc -eq 0 && "$(fsck_field objects)" == 8 && "$(fsck_field ok)" == 8 && "$(fsck_field unrecoverable)" == 0 ]]; then
  ok "fs: fsck again: 8 objects ok, exit 0"
else bad "fs: second fsck exit $rc: $(cat "$work/out") $(errtail)"; fi
kv match --store "$FS" "$KEYS_V0"
want_out 0 "fs: match of a dropped block = 0"
for i in 2 3 4; do
  kv get --store "$FS" "${SUITE_KEYS[i]}"
  want_same "$data/${VALUES[i]}" "$work/out" "fs: ${VALUES[i]} untouched by the damage"
done

# --- ec:10+2 on 12 directories -------------------------------------------------------------------
ECDIRS=()
for i in $(seq 0 11); do ECDIRS+=("$work/ec/d$i"); done
mkdir -p "$work/ec"
EC="ec:10+2:$(IFS=,; echo "${ECDIRS[*]}")"
suite ec "$EC" "${ECDIRS[@]}"
D0=${ECDIRS[0]} D10=${ECDIRS[10]} D11=${ECDIRS[11]}

# Two domains lost: d0's chunk files deleted, every d10 chunk with a flipped byte.
snap="$work/ec-snap"
mkdir -p "$snap/d0" "$snap/d10"
chunks "$D0" | xargs -r -d '\n' cp -t "$snap/d0"
chunks "$D10" | xargs -r -d '\n' cp -t "$snap/d10"
n0=$(nchunks "$D0")
lose_delete "$D0"
lose_flip "$D10"
for i in "${!VALUES[@]}"; do
  v=${VALUES[i]}; [[ $v == v1 ]] && v=v1b
  kv get --store "$EC" "${SUITE_KEYS[i]}"
  want_same "$data/$v" "$work/out" "ec: d0 deleted + d10 corrupt: get ${VALUES[i]} exact"
done
kv fsck --store "$EC"
if [[ $rc -eq 0 && "$(fsck_field objects)" == "$n0" && "$(fsck_field unrecoverable)" == 0 ]] &&
   (($(fsck_field repaired) >= 5 && $(fsck_field ok) + $(fsck_field repaired) == n0)); then
  ok "ec: fsck repairs (exit 0: $(cat "$work/out"))"
else bad "ec: fsck exit $rc, want 0 with $n0 objects, >= 5 repaired (the unread chain blocks), 0 unrecoverable: $(cat "$work/out") $(errtail)"; fi
same=1
for dom in d0 d10; do
  [[ $(nchunks "$work/ec/$dom") -eq $n0 ]] || same=0
  for f in "$snap/$dom"/*; do cmp -s "$f" "$work/ec/$dom/$(basename "$f" | cut -c1-2)/$(basename "$f")" || same=0; done
done
[[ $same -eq 1 ]] && ok "ec: fsck rewrote d0's and d10's $n0 chunk files byte-identical to the originals" ||
  bad "ec: after fsck d0/d10 chunk files differ from the originals (d0 $(nchunks "$D0"), d10 $(nchunks "$D10") files, want $n0)"
kv fsck --store "$EC"
if [[ $rc -eq 0 && "$(fsck_field ok)" == "$n0" && "$(fsck_field repaired)" == 0 ]]; then ok "ec: fsck again: all $n0 ok"
else bad "ec: second fsck exit $rc: $(cat "$work/out")"; fi
kv get --store "$EC" "${SUITE_CHAIN[0]}"
want_same "$work/ec/c0" "$work/out" "ec: a chain block never read while degraded: exact after fsck"

# Three domains lost: d0 deleted, d10 flipped, d11 truncated. Every block is gone: clean misses.
lose_delete "$D0"
lose_flip "$D10"
lose_truncate "$D11"
for i in "${!VALUES[@]}"; do
  kv get --store "$EC" "${SUITE_KEYS[i]}"
  want_miss "ec: d0 + d10 + d11 lost: get ${VALUES[i]} is a clean miss"
done
kv fsck --store "$EC"
if [[ $rc -eq 3 && "$(fsck_field ok)" == 0 && "$(fsck_field objects)" == "$(fsck_field unrecoverable)" ]] &&
   (($(fsck_field unrecoverable) >= 5)); then
  ok "ec: fsck with three domains lost: exit 3 ($(cat "$work/out"))"
else bad "ec: fsck exit $rc, want 3 with every object (>= 5) unrecoverable: $(cat "$work/out") $(errtail)"; fi
kv match --store "$EC" "${SUITE_CHAIN[@]}"
want_out 0 "ec: match after fsck dropped the lost blocks = 0"
kv stat --store "$EC" --json
[[ "$(field objects)" == "$(printf '0 %.0s' $(seq 12) | sed 's/ $//')" && "$(field used_bytes)" == "$(printf '0 %.0s' $(seq 12) | sed 's/ $//')" ]] &&
  ok "ec: stat: 0 objects and 0 bytes on every domain" || bad "ec: stat objects '$(field objects)' used '$(field used_bytes)'"
k=$(newkey)
kv put --store "$EC" "$k" <"$data/v112k"
want_rc 0 "ec: put after the loss"
kv get --store "$EC" "$k"
want_same "$data/v112k" "$work/out" "ec: get after the loss: exact"

secs=$(( ($(date +%s%N) - T0) / 1000000 ))
if [[ $fails -ne 0 ]]; then
  echo "kv cli: $fails of $checks checks failed ($((secs / 1000)).$(printf '%03d' $((secs % 1000))) s)" >&2
  exit 1
fi
echo "kv cli: ok, $checks checks ($((secs / 1000)).$(printf '%03d' $((secs % 1000))) s)"
