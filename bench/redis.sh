#!/usr/bin/env bash
# bench/redis.sh: extauthz's rate limit service on Redis, against the
# redis-benchmark ceiling of the same GCRA script on the same Redis.
#
# Starts its own redis-server on a free loopback port (never 6379), builds
# extauthz and extauthz-load, and prints Markdown tables for
# docs/benchmarks-redis.md:
#   1. ShouldRateLimit through extauthz: 1 hot key and 10,000 keys, at
#      concurrency 16 and 64, every call admitted (the Redis write path);
#      requests/s, p50, p99, and CPU per request of extauthz and of Redis
#      (utime+stime from /proc/<pid>/stat around each run);
#   2. a hot key far over its limit, local over-limit cache on and off;
#   3. redis-benchmark EVALSHA of decide.lua (GCRA), hot key and 10,000 keys,
#      -c 16/64, unpipelined (-P 1: one call per request, like the service)
#      and pipelined (-P 16);
#   4. MEMORY USAGE per key per algorithm at steady state.
#
# Usage: bench/redis.sh            (DURATION=10s per run by default)
#        DURATION=3s bench/redis.sh
# Needs: go, redis-server, redis-cli, redis-benchmark, jq, python3 (free port).
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-10s}
. bench/lib.sh # work, pids, cleanup, freeport, cputicks, hz

go build -o "$work/extauthz" ./cmd/extauthz
go build -o "$work/extauthz-load" ./cmd/extauthz-load

start_redis
rcli() { redis-cli -p "$rport" "$@"; }

mkdir -p "$work/policy"
cat >"$work/policy/bench.yaml" <<'YAML'
domain: bench
descriptors:
  # Never over the limit: every call runs the GCRA script and writes.
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: gcra}
YAML
cat >"$work/policy/over.yaml" <<'YAML'
domain: over
descriptors:
  # Always over the limit after the first 10 calls.
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 10, algorithm: gcra}
YAML
usedmem() { rcli info memory | awk -F: '/^used_memory:/{print $2}' | tr -d '\r'; }
baseline=$(usedmem)

# start_extauthz NAME ENV...: runs extauthz on free ports; sets $grpc_addr, $xpid.
start_extauthz() {
	local name=$1
	shift
	local gport hport
	gport=$(freeport)
	hport=$(freeport)
	env EXTAUTHZ_GRPC_ADDR="127.0.0.1:$gport" EXTAUTHZ_HTTP_ADDR="127.0.0.1:$hport" \
		EXTAUTHZ_CONFIG="$work/policy" EXTAUTHZ_REDIS_URL="redis://127.0.0.1:$rport" \
		EXTAUTHZ_LOG_LEVEL=warn "$@" "$work/extauthz" 2>"$work/$name.log" &
	xpid=$!
	pids+=("$xpid")
	grpc_addr="127.0.0.1:$gport"
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "extauthz $name not ready" >&2
	cat "$work/$name.log" >&2
	exit 1
}

# load PID DOMAIN KEYS CONC: one load run; prints a table row.
load() {
	local pid=$1 domain=$2 keys=$3 conc=$4 x0 r0 x1 r1 out
	x0=$(cputicks "$pid")
	r0=$(cputicks "$rpid")
	out=$("$work/extauthz-load" -addr "$grpc_addr" -domain "$domain" -keys "$keys" \
		-concurrency "$conc" -duration "$DURATION" -json)
	x1=$(cputicks "$pid")
	r1=$(cputicks "$rpid")
	jq -r --arg keys "$keys" --arg conc "$conc" --argjson x "$((x1 - x0))" --argjson r "$((r1 - r0))" --argjson hz "$hz" '
		"| \($keys) | \($conc) | \(.requests_per_second | floor) | \(.p50_ns / 1000 | floor) µs | \(.p99_ns / 1000 | floor) µs | \(.ok) | \(.over_limit) | \(.errors) | \(if .requests > 0 then ($x * 1e6 / $hz / .requests | floor) else 0 end) µs | \(if .requests > 0 then ($r * 1e6 / $hz / .requests | floor) else 0 end) µs |"' <<<"$out"
}

echo "Machine: $(nproc) CPUs, $(uname -sr), $(redis-server --version | awk '{print $3}'), load average at start: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "Duration per run: $DURATION"
echo
echo "### ShouldRateLimit through extauthz on Redis (GCRA, every call admitted)"
echo
echo "| keys | concurrency | requests/s | p50 | p99 | ok | over | errors | extauthz CPU/req | Redis CPU/req |"
echo "|---|---|---|---|---|---|---|---|---|---|"
start_extauthz cached
cached_pid=$xpid
cached_addr=$grpc_addr
for keys in 1 10000; do
	for conc in 16 64; do
		load "$cached_pid" bench "$keys" "$conc"
	done
done

echo
echo "### A hot key over its limit: local over-limit cache on and off (concurrency 64)"
echo
echo "| cache | requests/s | p50 | p99 | ok | over | errors | extauthz CPU/req | Redis CPU/req |"
echo "|---|---|---|---|---|---|---|---|---|"
grpc_addr=$cached_addr
printf '| on |'
load "$cached_pid" over 1 64 | cut -d'|' -f4-
start_extauthz nocache EXTAUTHZ_LOCAL_CACHE=false
printf '| off |'
load "$xpid" over 1 64 | cut -d'|' -f4-


# 10,000 GCRA keys that live for up to an hour (10/hour): the whole-keyspace
# cost per key, dict and expiry overhead included.
rcli flushall >/dev/null
baseline=$(usedmem)
"$work/extauthz-load" -addr "$grpc_addr" -domain over -keys 10000 -concurrency 16 -duration "$DURATION" >/dev/null
keys_after=$(rcli dbsize)
per_key=$((($(usedmem) - baseline) / keys_after))

echo
echo "### Ceiling: redis-benchmark EVALSHA of the same GCRA script on the same Redis"
echo
sha=$(rcli script load "$(cat pkg/ratelimit/redisstore/decide.lua)")
echo "| keys | -c | -P | requests/s | p50 |"
echo "|---|---|---|---|---|"
for keys in 1 10000; do
	if [ "$keys" = 1 ]; then key='xa:rl:{|bench|user=k0}:gcra:1000'; rflag=(); else key='xa:rl:{|bench|user=k__rand_int__}:gcra:1000'; rflag=(-r 10000); fi
	for conc in 16 64; do
		for pipe in 1 16; do
			n=$((pipe == 1 ? 200000 : 1000000))
			line=$(redis-benchmark -p "$rport" -q -n "$n" -c "$conc" -P "$pipe" "${rflag[@]}" \
				EVALSHA "$sha" 1 "$key" 1 "" 1 1000000000 1000000 0 | tr '\r' '\n' | grep -a 'requests per second' | tail -1)
			rps=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<<"$line")
			p50=$(sed -nE 's/.*p50=([0-9.]+) msec.*/\1/p' <<<"$line")
			echo "| $keys | $conc | $pipe | ${rps%.*} | ${p50:-?} ms |"
		done
	done
done

echo
echo "Calibration on the same Redis (-c 16): the floor of any script and of a plain command."
echo
echo "| command | -P | requests/s | p50 |"
echo "|---|---|---|---|"
minimal="local t = redis.call('GET', KEYS[1]); redis.call('SET', KEYS[1], '1700006400000000', 'PX', '1000'); return {1, 2, 3}"
for pipe in 1 16; do
	n=$((pipe == 1 ? 200000 : 1000000))
	for cmd in INCR EVAL; do
		if [ "$cmd" = INCR ]; then args=(INCR 'cal{x}'); label='INCR'; else args=(EVAL "$minimal" 1 'cal{x}'); label='EVAL of GET + SET PX (minimal script)'; fi
		line=$(redis-benchmark -p "$rport" -q -n "$n" -c 16 -P "$pipe" "${args[@]}" | tr '\r' '\n' | grep -a 'requests per second' | tail -1)
		rps=$(sed -E 's/.*: ([0-9.]+) requests per second.*/\1/' <<<"$line")
		p50=$(sed -nE 's/.*p50=([0-9.]+) msec.*/\1/p' <<<"$line")
		echo "| $label | $pipe | ${rps%.*} | ${p50:-?} ms |"
	done
done

echo
echo "### Redis memory per key (MEMORY USAGE key SAMPLES 0), at steady state"
echo
rcli flushall >/dev/null
t0=1700006400000000
key() { echo "xa:rl:{acme|api|user=1234567}:$1"; }
# decide ARGS...: runs the script at a fixed instant (test-only argument).
decide() { rcli evalsha "$sha" 1 "$@" >/dev/null; }
echo "| algorithm | limit | state | bytes | encoding |"
echo "|---|---|---|---|---|"
mem() { echo "| $1 | $2 | $3 | $(rcli memory usage "$4" samples 0) | $(rcli object encoding "$4") |"; }
decide "$(key gcra:60000)" 1 "$t0" 1 100 60000000 0
mem gcra 100/min "TAT (one integer)" "$(key gcra:60000)"
decide "$(key fixed_window:60000)" 50 "$t0" 4 100 60000000 0
mem fixed_window 100/min "window index + count" "$(key fixed_window:60000)"
decide "$(key sliding_window:60000)" 50 "$((t0 - 60000000))" 3 100 60000000 0
decide "$(key sliding_window:60000)" 50 "$t0" 3 100 60000000 0
mem sliding_window 100/min "index + two counts" "$(key sliding_window:60000)"
for l in 100 1000; do
	for i in $(seq 0 $((l / 50 - 1))); do
		decide "$(key sliding_log:60000:$l)" 50 "$((t0 + i * 1000))" 2 "$l" 60000000 0
	done
	mem sliding_log "$l/min" "$l entries (full)" "$(key sliding_log:60000:$l)"
done
echo
echo "Whole keyspace with $keys_after GCRA keys written through extauthz: $per_key B per key on average (used_memory growth divided by the keys: includes Redis's dict and expires overhead)."
