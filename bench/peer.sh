#!/usr/bin/env bash
# bench/peer.sh: extauthz against envoyproxy/ratelimit on the same Redis,
# with the same load tool, in alternating runs.
#
# Starts one redis-server on a free loopback port (never 6379), builds
# envoyproxy/ratelimit from the source checkout in PEER_SRC (this script never
# downloads it; see docs/benchmarks-redis.md for how to get one), builds
# extauthz and extauthz-load, and runs, for each concurrency and each round,
# one run per service in a rotating order:
#   peer    envoyproxy/ratelimit, default settings (no local cache), Redis
#   xa      extauthz on Redis, fixed_window (the peer's algorithm)
#   xagcra  extauthz on Redis, gcra (same process, another domain)
#   xamem   extauthz with its in-process memory store
#   base    extauthz built from git ref BASELINE, on Redis (only if set)
#   floor   bench/floorrls: grpc-go answering OK with no decision, set up as
#           extauthz's server is (unless FLOOR=0): the CPU per call and the
#           latency that grpc-go itself costs any service built on it
#   xaallot      extauthz on Redis, fixed_window with consistency: allotment
#   xaallotgcra  extauthz on Redis, gcra with consistency: allotment
# Each run: ShouldRateLimit with one descriptor over one gRPC connection,
# 10,000 keys, a limit never reached, a warm-up run then a measured run.
# The load tool's client is LOAD_CLIENT: h2 (its lean HTTP/2 client, under a
# third of grpc-go's CPU per call, which shares the cores with the servers)
# or grpc (grpc-go, as the runs recorded before it).
# CPU of the server and of Redis comes from /proc/<pid>/stat (utime+stime)
# around the measured run. Then ext_authz Check with one HTTP limit on
# Redis (xa, and base if set). Then the hot keys (api "rlshot" in the rows):
# the same ShouldRateLimit over HOT_KEYS keys only, for the peer, xa, xagcra
# and both allotment services, in a rotating order; and the allotment
# services over KEYS keys at ALLOT_CONCS, beside xa and xagcra.
#
# Prints the raw rows and the ratio table, writes the rows to
# $OUT.tsv and the chart to $OUT.png (matplotlib; PLOT_PYTHON names a python
# that has it, else a throwaway venv under /tmp is made with pip).
#
# Usage: PEER_SRC=/tmp/ratelimit bench/peer.sh
#        PEER_SRC=/tmp/ratelimit BASELINE=c75c11d ROUNDS=1 CONCS="1 64" bench/peer.sh
# Variables (defaults): CONCS ("1 2 4 8 16 32 64 128"), ROUNDS (2),
#   DURATION (8s), WARMUP (1s), KEYS (10000), CHECK_CONCS ("1 16 64"),
#   GCRA_CONCS ("1 16 64"), OUT (docs/benchmarks-redis-peer), MAX_BATCH (128,
#   extauthz's EXTAUTHZ_REDIS_MAX_BATCH for xa; the baseline predates it),
#   HOT_KEYS (10), HOT_CONCS ("64"), ALLOT_CONCS ("64"), LOAD_CLIENT (h2),
#   FLOOR (1), RLS_CHARGE (unset; `always` counts as the peer does). Any list of
#   concurrencies set empty skips its runs, e.g. only the hot keys:
#   CONCS= GCRA_CONCS= ALLOT_CONCS= CHECK_CONCS= ROUNDS=8 bench/peer.sh
# Needs: go, redis-server, redis-cli, curl, jq, python3.
set -euo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)

: "${PEER_SRC:?set PEER_SRC to a source checkout of github.com/envoyproxy/ratelimit}"
CONCS=${CONCS-"1 2 4 8 16 32 64 128"}
ROUNDS=${ROUNDS:-2}
DURATION=${DURATION:-8s}
WARMUP=${WARMUP:-1s}
KEYS=${KEYS:-10000}
CHECK_CONCS=${CHECK_CONCS-"1 16 64"}
GCRA_CONCS=${GCRA_CONCS-"1 16 64"}
OUT=${OUT:-docs/benchmarks-redis-peer}
BASELINE=${BASELINE:-}
HOT_KEYS=${HOT_KEYS:-10}
HOT_CONCS=${HOT_CONCS-64}
ALLOT_CONCS=${ALLOT_CONCS-64}
LOAD_CLIENT=${LOAD_CLIENT:-h2}
FLOOR=${FLOOR:-1}

. bench/lib.sh # work, pids, cleanup, freeport, cputicks, hz

echo "building (peer from $PEER_SRC)..." >&2
(cd "$PEER_SRC" && go build -o "$work/peer" ./src/service_cmd)
go build -o "$work/extauthz" ./cmd/extauthz
go build -o "$work/extauthz-load" ./cmd/extauthz-load
go build -o "$work/floorrls" ./bench/floorrls
if [ -n "$BASELINE" ]; then
	mkdir "$work/base-src"
	git archive "$BASELINE" | tar -x -C "$work/base-src"
	(cd "$work/base-src" && go build -o "$work/extauthz-base" ./cmd/extauthz)
fi

start_redis

# One policy for extauthz: two RLS domains and one HTTP route.
write_bench_policy "$work/policy"
cat >"$work/policy/bench_gcra.yaml" <<'YAML'
domain: bench_gcra
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: gcra}
YAML
# The allotment services: the same limits, decided from slices leased from
# Redis (docs/algorithms.md, "Consistency").
cat >"$work/policy/bench_allot.yaml" <<'YAML'
domain: bench_allot
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: fixed_window, consistency: allotment}
YAML
cat >"$work/policy/bench_allot_gcra.yaml" <<'YAML'
domain: bench_allot_gcra
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: gcra, consistency: allotment}
YAML
cat >"$work/policy/http.yaml" <<'YAML'
http:
  tenant: {header: x-tenant-id}
  routes:
    - name: bench
      path_prefix: /
      rate_limits:
        - {requests_per_unit: 1000000000, unit: second, algorithm: fixed_window, name: bench}
YAML
# The same limit for the peer (its file format).
mkdir -p "$work/peer-rt/ratelimit/config"
cat >"$work/peer-rt/ratelimit/config/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000}
YAML

# waitready URL NAME: polls a readiness URL.
waitready() {
	for _ in $(seq 150); do
		curl -fsS "$1" >/dev/null 2>&1 && return
		sleep 0.1
	done
	echo "$2 not ready" >&2
	cat "$work/$2.log" >&2
	exit 1
}

# start_extauthz NAME BINARY ENV...: sets addr_NAME and pid_NAME.
start_extauthz() {
	local name=$1 bin=$2 gport hport
	shift 2
	gport=$(freeport)
	hport=$(freeport)
	env EXTAUTHZ_GRPC_ADDR="127.0.0.1:$gport" EXTAUTHZ_HTTP_ADDR="127.0.0.1:$hport" \
		EXTAUTHZ_CONFIG="$work/policy" EXTAUTHZ_LOG_LEVEL=warn "$@" "$bin" 2>"$work/$name.log" &
	pids+=($!)
	printf -v "pid_$name" %s $!
	printf -v "addr_$name" %s "127.0.0.1:$gport"
	waitready "http://127.0.0.1:$hport/readyz" "$name"
}

start_peer() {
	local gport hport dport
	gport=$(freeport)
	hport=$(freeport)
	dport=$(freeport)
	env USE_STATSD=false LOG_LEVEL=warn REDIS_SOCKET_TYPE=tcp REDIS_URL="127.0.0.1:$rport" \
		RUNTIME_ROOT="$work/peer-rt" RUNTIME_SUBDIRECTORY=ratelimit RUNTIME_WATCH_ROOT=false \
		HOST=127.0.0.1 PORT="$hport" GRPC_HOST=127.0.0.1 GRPC_PORT="$gport" \
		DEBUG_HOST=127.0.0.1 DEBUG_PORT="$dport" "$work/peer" 2>"$work/peer.log" &
	pids+=($!)
	pid_peer=$!
	addr_peer="127.0.0.1:$gport"
	waitready "http://127.0.0.1:$hport/healthcheck" peer
}

# start_floor: bench/floorrls, ready once its port accepts.
start_floor() {
	local gport
	gport=$(freeport)
	"$work/floorrls" "127.0.0.1:$gport" 2>"$work/floor.log" &
	pids+=($!)
	pid_floor=$!
	addr_floor="127.0.0.1:$gport"
	for _ in $(seq 100); do
		(exec 3<>"/dev/tcp/127.0.0.1/$gport") 2>/dev/null && return
		sleep 0.1
	done
	echo "floor not ready" >&2
	cat "$work/floor.log" >&2
	exit 1
}

redis_env=(EXTAUTHZ_REDIS_URL="redis://127.0.0.1:$rport")
start_peer
# Coalescing (EXTAUTHZ_REDIS_MAX_BATCH, default 128) is what xa measures.
# RLS_CHARGE (unset: extauthz's own policy default, if_admitted) sets
# EXTAUTHZ_RLS_CHARGE for xa and xamem: `always` is the peer's counting.
charge_env=(${RLS_CHARGE:+EXTAUTHZ_RLS_CHARGE="$RLS_CHARGE"})
start_extauthz xa "$work/extauthz" "${redis_env[@]}" EXTAUTHZ_REDIS_MAX_BATCH="${MAX_BATCH:-128}" "${charge_env[@]}"
start_extauthz xamem "$work/extauthz" "${charge_env[@]}"
services=(peer xa xamem)
if [ "$FLOOR" != 0 ]; then
	start_floor
	services+=(floor)
fi
if [ -n "$BASELINE" ]; then
	# A baseline may predate consistency: allotment; give it the policy
	# without those domains.
	cp -r "$work/policy" "$work/policy-base"
	rm -f "$work/policy-base"/bench_allot*.yaml
	start_extauthz base "$work/extauthz-base" "${redis_env[@]}" EXTAUTHZ_CONFIG="$work/policy-base"
	services+=(base)
fi
# The gcra and allotment services are other domains of the xa process.
for svc in xagcra xaallot xaallotgcra; do
	printf -v "pid_$svc" %s "$pid_xa"
	printf -v "addr_$svc" %s "$addr_xa"
done

# run SERVICE API CONC ROUND: a warm-up run, then a measured run; appends
# one row to $work/rows.tsv.
run() {
	local svc=$1 api=$2 conc=$3 round=$4 pid addr domain=bench key=user keys=$KEYS loadapi=$2 x0 r0 x1 r1 s0 s1 out
	pid=pid_$svc addr=addr_$svc
	pid=${!pid} addr=${!addr}
	case $svc in
	xagcra) domain=bench_gcra ;;
	xaallot) domain=bench_allot ;;
	xaallotgcra) domain=bench_allot_gcra ;;
	esac
	[ "$api" = authz ] && key=x-tenant-id
	[ "$api" = rlshot ] && keys=$HOT_KEYS loadapi=rls
	local args=(-client "$LOAD_CLIENT" -addr "$addr" -api "$loadapi" -domain "$domain" -key "$key" -keys "$keys" -concurrency "$conc")
	"$work/extauthz-load" "${args[@]}" -duration "$WARMUP" >/dev/null
	x0=$(cputicks "$pid")
	r0=$(cputicks "$rpid")
	s0=$(stealticks)
	out=$("$work/extauthz-load" "${args[@]}" -duration "$DURATION" -json)
	x1=$(cputicks "$pid")
	r1=$(cputicks "$rpid")
	s1=$(stealticks)
	jq -r --arg svc "$svc" --arg api "$api" --arg conc "$conc" --arg round "$round" \
		--argjson x "$((x1 - x0))" --argjson r "$((r1 - r0))" --argjson hz "$hz" \
		--arg load "$(cut -d' ' -f1 /proc/loadavg)" --arg steal "$(steal_pct "$s0" "$s1")" '
		[$round, $api, $svc, $conc, (.requests_per_second | floor), (.p50_ns / 1000 | floor),
		 (.p99_ns / 1000 | floor), .ok, .over_limit, .errors,
		 (if .requests > 0 then ($x * 1e6 / $hz / .requests * 10 | floor) / 10 else 0 end),
		 (if .requests > 0 then ($r * 1e6 / $hz / .requests * 10 | floor) / 10 else 0 end), $load, $steal] | @tsv' \
		<<<"$out" | tee -a "$work/rows.tsv" >&2
	# A failed call is rare and worth its reason (the rows only count it).
	jq -r --arg svc "$svc" --arg conc "$conc" 'select(.errors > 0) |
		"  \($svc) c=\($conc): \(.errors) calls failed, the first with: \(.first_error)"' <<<"$out" >&2
}

echo "Machine: $(nproc) CPUs, $(uname -sr), redis $(redis-server --version | awk '{print $3}'), peer $(git -C "$PEER_SRC" rev-parse --short HEAD 2>/dev/null || echo '?'), extauthz $(git rev-parse --short HEAD)${BASELINE:+, baseline $BASELINE}"
echo "uptime at start: $(uptime)"
echo "Runs: $WARMUP warm-up + $DURATION measured, $KEYS keys, one connection; rounds: $ROUNDS"
printf 'round\tapi\tservice\tconcurrency\trps\tp50_us\tp99_us\tok\tover\terrors\tserver_cpu_us\tredis_cpu_us\tload1\tsteal_pct\n' >"$work/rows.tsv"
echo "(rows as they come: round api service concurrency rps p50 p99 ok over errors server-CPU/req Redis-CPU/req load1 steal%)" >&2
# has WORD LIST...: whether WORD is one of LIST.
has() {
	local w=$1
	shift
	for x in "$@"; do [ "$x" = "$w" ] && return 0; done
	return 1
}
# Every concurrency of any list, in increasing order.
all_concs=$(printf '%s\n' $CONCS $GCRA_CONCS $ALLOT_CONCS | sort -nu)
for round in $(seq "$ROUNDS"); do
	for conc in $all_concs; do
		# The services measured at this concurrency take turns in one
		# rotation, so that every ratio (xaallot / xa included) compares
		# runs minutes apart at most; the order rotates with the round and
		# the concurrency, so no service always runs first.
		turn=()
		has "$conc" $CONCS && turn+=("${services[@]}")
		has "$conc" $GCRA_CONCS && turn+=(xagcra)
		has "$conc" $ALLOT_CONCS && turn+=(xaallot xaallotgcra)
		n=${#turn[@]}
		shift_by=$(((round + conc) % n))
		for i in $(seq 0 $((n - 1))); do
			run "${turn[$(((i + shift_by) % n))]}" rls "$conc" "$round"
		done
	done
	hot=(peer xa xagcra xaallot xaallotgcra)
	for conc in $HOT_CONCS; do
		for i in $(seq 0 4); do run "${hot[$(((i + round) % 5))]}" rlshot "$conc" "$round"; done
	done
	for conc in $CHECK_CONCS; do
		checks=(xa)
		[ -n "$BASELINE" ] && checks=(xa base)
		# Alternate which goes first, round by round.
		[ $((round % 2)) = 0 ] && checks=("${checks[@]:1}" "${checks[0]}")
		for svc in "${checks[@]}"; do run "$svc" authz "$conc" "$round"; done
	done
done
echo "uptime at end: $(uptime)"

mkdir -p "$(dirname "$OUT")"
cp "$work/rows.tsv" "$OUT.tsv"
if [ -z "${PLOT_PYTHON:-}" ]; then
	PLOT_PYTHON=/tmp/extauthz-plot-venv/bin/python
	if ! "$PLOT_PYTHON" -c 'import matplotlib' 2>/dev/null; then
		python3 -m venv /tmp/extauthz-plot-venv
		/tmp/extauthz-plot-venv/bin/pip install -q matplotlib
	fi
fi
"$PLOT_PYTHON" bench/peer_report.py "$OUT.tsv" "$OUT.png"
echo
echo "rows: $OUT.tsv, chart: $OUT.png"
