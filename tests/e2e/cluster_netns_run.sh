#!/usr/bin/env bash
# The cluster across hosts, in Linux network namespaces: cluster_netns_run.sh <ladle binary> [streams] [max_tokens]
#
# Five namespaces of this test's own (names carry this shell's pid): a "switch" holding a bridge,
# and four hosts, each joined to the bridge by a veth pair, with addresses in 10.231.7.0/24:
#   ep  10.231.7.1  the entrypoint (HTTP on :8080), the kv-fetcher (owner of the shared store), the client
#   pf  10.231.7.2  prefill-0 (gRPC on :9100)
#   d0  10.231.7.3  decode-0  (gRPC on :9100)
#   d1  10.231.7.4  decode-1  (gRPC on :9100)
# The KV store is a directory (fs:) and the fetcher's socket a path: namespaces isolate only the
# network, so every engine reaches the one fetcher as `ladle cluster`'s engines do
# (--kv-fetcher socket:PATH; the entrypoint's --kv-check names the same socket). Every other byte
# goes between the namespaces' addresses, over the bridge; the namespaces have no other route, so
# nothing outside them is reachable.
#
# 1. Reference: concurrent greedy streams, unfaulted.
# 2. Link cut: the same streams; once each has its first token, decode-1's link goes down
#    (`ip link set eth0 down` in its namespace). The entrypoint declares it dead after
#    --dead-after-ms, its streams move: no client-visible error, every stream identical to its
#    reference. Then the link comes back up and decode-1 rejoins (a second cluster.engine_alive),
#    and requests are served.
# 3. Kill: the same streams; once each has 4 tokens (decoding), decode-0 is killed (SIGKILL). Its
#    streams move to decode-1, the engine that was cut and came back (the only decode engine
#    left): no error, identical to the references. Requests after it are decoded by decode-1
#    (ladle_handoff_imports_total, summed over live engines, grows; decode-1's CPU time too).
# 4. decode-0 is started again in its namespace on its address and rejoins.
# 5. SIGTERM: every process exits 0.
# Needs root, iproute2 (`ip netns`) and python3; exits 77 (skipped) without them, except under
# CI=true. Every wait has a deadline, and a watchdog ends the whole run after 240 s
# (LADLE_NETNS_WATCHDOG_S); on exit the processes are stopped by pid and the namespaces deleted
# (which deletes the bridge and the veths). LADLE_NETNS_KEEP_LOGS=DIR keeps the processes' logs.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
ladle="$1"
streams="${2:-32}"
max_tokens="${3:-48}"
E2E_NAME=e2e_cluster_netns
source "$here/common.sh"
[[ -x "$ladle" ]] || { echo "$E2E_NAME: no ladle binary at $ladle" >&2; exit 1; }
[[ "$(id -u)" == 0 ]] || skip_or_fail "needs root (network namespaces)"
command -v python3 >/dev/null 2>&1 || skip_or_fail "python3 not found"
ip="$(command -v ip || true)"
[[ -n "$ip" ]] || { [[ -x /usr/sbin/ip ]] && ip=/usr/sbin/ip; } || skip_or_fail "ip (iproute2) not found"
[[ -f "${LADLE_TOKENIZER:-$root/.cache/tokenizers/deepseek-v3/tokenizer.json}" ]] || skip_or_fail "tokenizer missing (run scripts/setup)"

tiny="$root/bench/serve/tiny_model.json"
dead_after_ms=1000
net=10.231.7
ep_addr="$net.1"; pf_addr="$net.2"; d0_addr="$net.3"; d1_addr="$net.4"
http_port=8080
grpc_port=9100
# The kv-fetcher's slot size: the tiny model's block value (what `ladle cluster` computes from
# the model and passes its fetcher: block_bytes=65536 in its log).
block_bytes=65536
tag="ladle$$"
ns_sw="$tag-sw"; ns_ep="$tag-ep"; ns_pf="$tag-pf"; ns_d0="$tag-d0"; ns_d1="$tag-d1"

work="$(mktemp -d)"
pids=()        # every process this test started, stopped by pid on exit
namespaces=()  # every namespace this test created, deleted on exit
status=0
watchdog=""

dump_logs() {
  for f in entrypoint prefill-0 decode-0 decode-0.restart decode-1 kvf; do
    [[ -f "$work/$f.log" ]] || continue
    echo "---- $f log (tail) ----" >&2
    tail -30 "$work/$f.log" >&2
  done
}

cleanup() {
  local rc=$?
  trap - EXIT INT TERM
  if [[ -n "$watchdog" ]]; then kill "$watchdog" 2>/dev/null || true; fi
  if [[ "$rc" != 0 || "$status" != 0 ]]; then dump_logs; fi
  local pid
  for pid in "${pids[@]}"; do kill -TERM "$pid" 2>/dev/null || true; done
  # Bounded: whatever has not exited after 10 s is killed.
  for _ in $(seq 1 100); do
    local any=0
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null && any=1; done
    [[ "$any" == 0 ]] && break
    sleep 0.1
  done
  for pid in "${pids[@]}"; do kill -KILL "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; done
  # Anything still in one of this test's namespaces was started by it: stop it before the
  # namespace goes (a namespace outlives its name while a process holds it).
  local ns
  for ns in "${namespaces[@]}"; do
    for pid in $("$ip" netns pids "$ns" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
  done
  for ns in "${namespaces[@]}"; do
    "$ip" netns del "$ns" 2>/dev/null || echo "$E2E_NAME: could not delete namespace $ns" >&2
  done
  if [[ -n "${LADLE_NETNS_KEEP_LOGS:-}" ]]; then mkdir -p "$LADLE_NETNS_KEEP_LOGS" && cp "$work"/*.log "$LADLE_NETNS_KEEP_LOGS"/ 2>/dev/null || true; fi
  rm -rf "$work"
  exit "$rc"
}
trap cleanup EXIT
watchdog_s="${LADLE_NETNS_WATCHDOG_S:-240}"
trap 'echo "FAIL terminated (SIGTERM: the $watchdog_s s watchdog, or from outside)" >&2; exit 143' TERM
trap 'exit 130' INT

# A watchdog: past $watchdog_s s the run ends (the EXIT trap still cleans up). Its sleep goes
# with it and holds no output pipe open (ctest waits for those).
( exec >/dev/null 2>&1; trap 'kill "$s" 2>/dev/null; wait "$s"; exit 0' TERM; sleep "$watchdog_s" & s=$!; wait "$s" && kill -TERM $$ ) &
watchdog=$!

t_start=$(date +%s.%N)
elapsed() { python3 -c "import sys;print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t_start" "$(date +%s.%N)"; }
fail() { echo "FAIL $*"; status=1; }
die() { echo "FAIL $*"; status=1; exit 1; }
in_ns() { local ns="$1"; shift; "$ip" netns exec "$ns" "$@"; }
# Background processes are started as `"$ip" netns exec NS CMD &` (never through a function: its
# subshell would be $!): `ip netns exec` execs CMD, so $! is the process itself.
# forget PID: a reaped process leaves the list (its pid may be reused by another).
forget() { local keep=() p; for p in "${pids[@]}"; do [[ "$p" == "$1" ]] || keep+=("$p"); done; pids=("${keep[@]}"); }

# ---- the network ----
if ! "$ip" netns add "$ns_sw" 2>"$work/netns.err"; then
  cat "$work/netns.err" >&2
  skip_or_fail "ip netns add failed (no network namespaces here)"
fi
namespaces+=("$ns_sw")
for ns in "$ns_ep" "$ns_pf" "$ns_d0" "$ns_d1"; do
  "$ip" netns add "$ns" || die "ip netns add $ns"
  namespaces+=("$ns")
done
# IPv6 off (no router solicitations or DAD): the hosts speak only the addresses below.
for ns in "${namespaces[@]}"; do
  in_ns "$ns" sh -c 'echo 1 > /proc/sys/net/ipv6/conf/all/disable_ipv6; echo 1 > /proc/sys/net/ipv6/conf/default/disable_ipv6' 2>/dev/null || true
  "$ip" -n "$ns" link set lo up || die "lo up in $ns"
done
"$ip" -n "$ns_sw" link add br0 type bridge || die "bridge"
"$ip" -n "$ns_sw" link set br0 up || die "bridge up"
# host_link NS ADDR PORT_NAME: a veth pair, eth0 in the host's namespace and PORT_NAME on the
# bridge, made in the namespaces directly (nothing is ever created in this machine's own).
host_link() {
  local ns="$1" addr="$2" port="$3"
  "$ip" -n "$ns_sw" link add "$port" type veth peer name eth0 netns "$ns" || die "veth for $ns"
  "$ip" -n "$ns_sw" link set "$port" master br0 || die "$port on the bridge"
  "$ip" -n "$ns_sw" link set "$port" up || die "$port up"
  "$ip" -n "$ns" addr add "$addr/24" dev eth0 || die "address in $ns"
  "$ip" -n "$ns" link set eth0 up || die "eth0 up in $ns"
}
host_link "$ns_ep" "$ep_addr" p-ep
host_link "$ns_pf" "$pf_addr" p-pf
host_link "$ns_d0" "$d0_addr" p-d0
host_link "$ns_d1" "$d1_addr" p-d1
echo "$E2E_NAME: namespaces ${namespaces[*]}: bridge br0 in $ns_sw; ep $ep_addr, pf $pf_addr, d0 $d0_addr, d1 $d1_addr"

# ---- the processes ----
export LADLE_API_KEYS=""  # a keyless entrypoint (the client sends none)
mkdir -p "$work/kv"
"$ip" netns exec "$ns_ep" "$ladle" kv-fetcher --store "fs:$work/kv" --socket "$work/kvf.sock" --block-bytes "$block_bytes" \
  >"$work/kvf.log" 2>&1 &
kvf_pid=$!; pids+=("$kvf_pid")
for _ in $(seq 1 100); do [[ -S "$work/kvf.sock" ]] && break; kill -0 "$kvf_pid" 2>/dev/null || break; sleep 0.1; done
[[ -S "$work/kvf.sock" ]] || die "the kv-fetcher did not start within 10 s"

# start_engine NAME ROLE NS ADDR [LOG]: a `ladle engine` in NS listening on ADDR:$grpc_port; sets $engine_pid.
start_engine() {
  local name="$1" role="$2" ns="$3" addr="$4" log="${5:-$1}"
  rm -f "$work/$name.port"
  "$ip" netns exec "$ns" "$ladle" engine --role "$role" --name "$name" --listen "$addr:$grpc_port" --advertise "$addr:$grpc_port" \
    --port-file "$work/$name.port" --kv-fetcher "socket:$work/kvf.sock" \
    --model-config "$tiny" --max-queue 512 --max-running 64 --kv-blocks 512 >"$work/$log.log" 2>&1 &
  engine_pid=$!
  pids+=("$engine_pid")
}
# wait_port NAME PID: the engine serves (its port file) within 120 s.
wait_port() {
  local name="$1" pid="$2"
  for _ in $(seq 1 1200); do
    if [[ -f "$work/$name.port" ]]; then
      # The pid is the engine's own (what the tests kill), not a shell's or ip's.
      [[ "$(readlink "/proc/$pid/exe")" == "$(readlink -f "$ladle")" ]] || die "$name: pid $pid is not the ladle process"
      return 0
    fi
    kill -0 "$pid" 2>/dev/null || die "$name exited during start-up"
    sleep 0.1
  done
  die "$name did not start within 120 s"
}
start_engine prefill-0 prefill "$ns_pf" "$pf_addr"; pf_pid=$engine_pid
start_engine decode-0 decode "$ns_d0" "$d0_addr"; d0_pid=$engine_pid
start_engine decode-1 decode "$ns_d1" "$d1_addr"; d1_pid=$engine_pid
wait_port prefill-0 "$pf_pid"; wait_port decode-0 "$d0_pid"; wait_port decode-1 "$d1_pid"

"$ip" netns exec "$ns_ep" "$ladle" entrypoint --host "$ep_addr" --port "$http_port" \
  --engine "$pf_addr:$grpc_port" --engine "$d0_addr:$grpc_port" --engine "$d1_addr:$grpc_port" \
  --kv-check "socket:$work/kvf.sock" --dead-after-ms "$dead_after_ms" \
  --model-config "$tiny" --max-queue 512 >"$work/entrypoint.log" 2>&1 &
ep_pid=$!; pids+=("$ep_pid")
log="$work/entrypoint.log"
alive_count() { grep -c "cluster.engine_alive address=$1 " "$log" || true; }
dead_count() { grep -c "cluster.engine_dead address=$1 " "$log" || true; }
reroutes_from() { grep -c "cluster.reroute .* from=$1 " "$log" || true; }
# Moved streams that had decode tokens (more than the prefill's one): resumed mid-decode.
resumed_from() { grep -o "cluster.reroute .* from=$1 generated=[0-9]*" "$log" | awk -F'generated=' '$2 > 1' | wc -l; }
# The tokens each moved stream had when it moved, e.g. "1 1 3 6 12".
moved_at() { grep -o "cluster.reroute .* from=$1 generated=[0-9]*" "$log" | sed 's/.*generated=//' | sort -n | tr '\n' ' '; }
# wait_for DEADLINE_S CMD...: until CMD succeeds (polled every 0.1 s); false past the deadline.
wait_for() {
  local n=$(( $1 * 10 )); shift
  for _ in $(seq 1 "$n"); do "$@" && return 0; sleep 0.1; done
  return 1
}
all_alive() { [[ "$(alive_count "$pf_addr:$grpc_port")" -ge 1 && "$(alive_count "$d0_addr:$grpc_port")" -ge 1 && "$(alive_count "$d1_addr:$grpc_port")" -ge 1 ]]; }
listening() { grep -q "server.listening host=$ep_addr port=$http_port" "$log"; }
wait_for 60 listening || die "the entrypoint did not listen on $ep_addr:$http_port within 60 s"
wait_for 30 all_alive || die "the entrypoint did not see all three engines alive within 30 s"
echo "ok   entrypoint in $ns_ep sees prefill-0, decode-0, decode-1 across the bridge ($(elapsed) s)"

# client ARGS...: cluster_netns.py in the entrypoint's namespace, bounded; waited for in the
# background so that the watchdog's SIGTERM is taken at once, not when it returns.
client() {
  timeout 150 "$ip" netns exec "$ns_ep" python3 "$here/cluster_netns.py" "$@" &
  local p=$! rc=0
  pids+=("$p")
  wait "$p" || rc=$?
  forget "$p"
  return "$rc"
}
metric() { client metric "$ep_addr" "$http_port" "$1"; }
cpu_ms() { awk '{print ($14 + $15) * 10}' "/proc/$1/stat"; }  # utime + stime, at 100 ticks/s

# ---- 1. the reference ----
client streams "$ep_addr" "$http_port" "$streams" "$max_tokens" "$work/ref.json" || die "the unfaulted reference run failed"
echo "ok   reference: $streams greedy streams x $max_tokens tokens ($(elapsed) s)"

# ---- 2. link cut ----
d1="$d1_addr:$grpc_port"
if client streams "$ep_addr" "$http_port" "$streams" "$max_tokens" "$work/cut.json" --reference "$work/ref.json" \
     --hook "$ip -n $ns_d1 link set eth0 down"; then
  echo "ok   link cut: every stream complete and identical to its reference"
else
  fail "link cut: the streams"
fi
dead_seen() { [[ "$(dead_count "$d1")" -ge 1 ]]; }
# The link stays down until the entrypoint has declared decode-1 dead (bounded).
if wait_for 15 dead_seen; then
  echo "ok   link cut: the entrypoint declared decode-1 dead: $(grep -o "cluster.engine_dead address=$d1 .*" "$log" | head -1)"
else
  fail "link cut: decode-1 was never declared dead"
fi
moved=$(reroutes_from "$d1")
if [[ "$moved" -ge 1 ]]; then echo "ok   link cut: $moved streams moved off decode-1 (tokens each had: $(moved_at "$d1"))"; else fail "link cut: no stream was on decode-1 when its link went down"; fi
kill -0 "$d1_pid" 2>/dev/null || fail "decode-1 exited while its link was down"
t_up=$(date +%s.%N)
"$ip" -n "$ns_d1" link set eth0 up || die "link up"
rejoined() { [[ "$(alive_count "$d1")" -ge 2 ]]; }
if wait_for 60 rejoined; then
  echo "ok   link restored: decode-1 rejoined $(python3 -c "import sys;print(f'{float(sys.argv[2]) - float(sys.argv[1]):.1f}')" "$t_up" "$(date +%s.%N)") s after the link came up"
else
  fail "link restored: decode-1 did not rejoin within 60 s"
fi
if client complete "$ep_addr" "$http_port" 8 16; then echo "ok   requests are served after the link came back"; else fail "no answers after the link came back"; fi
echo "     ($(elapsed) s)"

# ---- 3. kill decode-0 ----
d0="$d0_addr:$grpc_port"
disown "$d0_pid" 2>/dev/null || true  # no job-control "Killed" line in the output; still reaped
if client streams "$ep_addr" "$http_port" "$streams" "$max_tokens" "$work/kill.json" --reference "$work/ref.json" \
     --hook "kill -KILL $d0_pid" --hook-after-tokens 4; then
  echo "ok   kill: every stream complete and identical to its reference"
else
  fail "kill: the streams"
fi
gone() { ! kill -0 "$1" 2>/dev/null; }
wait_for 10 gone "$d0_pid" && forget "$d0_pid"
moved=$(reroutes_from "$d0")
if [[ "$moved" -ge 1 ]]; then echo "ok   kill: $moved streams moved off decode-0 (tokens each had: $(moved_at "$d0"))"; else fail "kill: no stream was on decode-0 when it was killed"; fi
if [[ "$(resumed_from "$d0")" -ge 1 ]]; then echo "ok   kill: $(resumed_from "$d0") of them resumed mid-decode on decode-1"; else fail "kill: no stream was decoding on decode-0 when it was killed"; fi
d0_dead() { [[ "$(dead_count "$d0")" -ge 1 ]]; }
wait_for 10 d0_dead || fail "kill: decode-0 was never declared dead"
# decode-1 (restored) is now the only decode engine: requests hand off to it.
if [[ "$(dead_count "$d1")" -ge 2 ]]; then fail "decode-1 was declared dead again"; fi
imports0=$(metric ladle_handoff_imports_total || echo 0)
cpu0=$(cpu_ms "$d1_pid")
if client complete "$ep_addr" "$http_port" 8 16; then
  imports1=$(metric ladle_handoff_imports_total || echo 0)
  cpu1=$(cpu_ms "$d1_pid")
  if [[ "$imports1" -gt "$imports0" ]]; then
    echo "ok   after the kill, decode-1 decodes: hand-off imports $imports0 -> $imports1, decode-1 CPU +$((cpu1 - cpu0)) ms"
  else
    fail "after the kill no hand-off was imported (imports $imports0 -> $imports1): decode-1 took no work"
  fi
else
  fail "no answers after the kill"
fi
echo "     ($(elapsed) s)"

# ---- 4. decode-0 again, on its address ----
start_engine decode-0 decode "$ns_d0" "$d0_addr" decode-0.restart; d0_pid=$engine_pid
wait_port decode-0 "$d0_pid"
d0_back() { [[ "$(alive_count "$d0")" -ge 2 ]]; }
if wait_for 30 d0_back; then echo "ok   decode-0 restarted in its namespace and rejoined"; else fail "decode-0 did not rejoin"; fi
if client complete "$ep_addr" "$http_port" 4 8; then echo "ok   requests are served with decode-0 back"; else fail "no answers with decode-0 back"; fi

# ---- 5. SIGTERM ----
# Requests the entrypoint failed, if any (each also failed a check above).
grep -h "cluster.request_failed" "$log" | head -5 | sed 's/^/     entrypoint: /' || true
for name_pid in "entrypoint:$ep_pid" "prefill-0:$pf_pid" "decode-0:$d0_pid" "decode-1:$d1_pid" "kv-fetcher:$kvf_pid"; do
  name="${name_pid%%:*}"; pid="${name_pid##*:}"
  kill -TERM "$pid" 2>/dev/null || { fail "$name ($pid) was gone before SIGTERM"; continue; }
  if ! wait_for 30 gone "$pid"; then fail "$name did not exit within 30 s of SIGTERM"; continue; fi
  code=0; wait "$pid" 2>/dev/null || code=$?
  forget "$pid"
  if [[ "$code" == 0 ]]; then echo "ok   SIGTERM: $name exits 0"; else fail "SIGTERM: $name exit code $code"; fi
done
echo "$E2E_NAME: $( [[ "$status" == 0 ]] && echo passed || echo FAILED ) in $(elapsed) s"
exit "$status"
