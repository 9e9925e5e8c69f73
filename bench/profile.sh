#!/usr/bin/env bash
# bench/profile.sh: a CPU profile of extauthz deciding on Redis under load.
#
# Starts one redis-server on a free loopback port, builds extauthz (from the
# working tree, or from git ref REF) and extauthz-load, runs ShouldRateLimit
# with one descriptor over one gRPC connection at concurrency CONC, and
# while it runs takes a CPU profile through EXTAUTHZ_DEBUG_ADDR (pprof,
# loopback only). Prints where the time went: the top functions by
# cumulative time and a split by area (syscalls, go-redis, gRPC, GC,
# extauthz's own code). Extra arguments are environment settings for
# extauthz, e.g. EXTAUTHZ_REDIS_MAX_BATCH=1 to profile without coalescing.
#
# Usage: bench/profile.sh
#        REF=dbd963e bench/profile.sh EXTAUTHZ_REDIS_MAX_BATCH=1
# Variables (defaults): CONC (64), SECONDS_PROFILED (8), KEYS (10000),
#   OUT (a file under /tmp; the raw profile, for `go tool pprof`),
#   KIND (cpu; or allocs: the allocations made while the load ran, by
#   function, with the allocations per decision), CONSISTENCY (exact; or
#   allotment: the limit decided from leased slices), STORE (redis; or
#   memory: the in-process store, no Redis), LOAD_CLIENT (h2, the load
#   tool's lean client, as bench/peer.sh; or grpc).
# Needs: go, redis-server, redis-cli, curl.
set -euo pipefail
cd "$(dirname "$0")/.."

CONC=${CONC:-64}
SECONDS_PROFILED=${SECONDS_PROFILED:-8}
KEYS=${KEYS:-10000}
REF=${REF:-}
KIND=${KIND:-cpu}
case $KIND in cpu | allocs) ;; *) echo "KIND is cpu or allocs, not $KIND" >&2; exit 2 ;; esac
CONSISTENCY=${CONSISTENCY:-exact}
case $CONSISTENCY in exact | allotment) ;; *) echo "CONSISTENCY is exact or allotment, not $CONSISTENCY" >&2; exit 2 ;; esac
STORE=${STORE:-redis}
LOAD_CLIENT=${LOAD_CLIENT:-h2}
case $STORE in redis | memory) ;; *) echo "STORE is redis or memory, not $STORE" >&2; exit 2 ;; esac

. bench/lib.sh # work, pids, cleanup, freeport

if [ -n "$REF" ]; then
	mkdir "$work/src"
	git archive "$REF" | tar -x -C "$work/src"
	(cd "$work/src" && go build -o "$work/extauthz" ./cmd/extauthz)
else
	go build -o "$work/extauthz" ./cmd/extauthz
fi
go build -o "$work/extauthz-load" ./cmd/extauthz-load
OUT=${OUT:-/tmp/extauthz-$KIND-${REF:-tree}-$CONC.pprof}

store=()
if [ "$STORE" = redis ]; then
	start_redis
	store=(EXTAUTHZ_REDIS_URL="redis://127.0.0.1:$rport")
fi

write_bench_policy "$work/policy"
if [ "$CONSISTENCY" = allotment ]; then
	sed -i 's/algorithm: fixed_window}/algorithm: fixed_window, consistency: allotment}/' "$work/policy/bench.yaml"
	grep -q 'consistency: allotment' "$work/policy/bench.yaml"
fi

gport=$(freeport)
hport=$(freeport)
dport=$(freeport)
env EXTAUTHZ_GRPC_ADDR="127.0.0.1:$gport" EXTAUTHZ_HTTP_ADDR="127.0.0.1:$hport" \
	EXTAUTHZ_DEBUG_ADDR="127.0.0.1:$dport" EXTAUTHZ_CONFIG="$work/policy" \
	"${store[@]}" EXTAUTHZ_LOG_LEVEL=warn "$@" \
	"$work/extauthz" 2>"$work/extauthz.log" &
pids+=($!)
for _ in $(seq 150); do curl -fsS "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1 && break; sleep 0.1; done

load=(-client "$LOAD_CLIENT" -addr "127.0.0.1:$gport" -domain bench -key user -keys "$KEYS" -concurrency "$CONC")
"$work/extauthz-load" "${load[@]}" -duration 1s >/dev/null
"$work/extauthz-load" "${load[@]}" -duration "$((SECONDS_PROFILED + 2))s" >"$work/load.txt" &
loadpid=$!
sleep 1
endpoint=profile
[ "$KIND" = allocs ] && endpoint=allocs # a delta over the seconds given
curl -fsS -o "$OUT" "http://127.0.0.1:$dport/debug/pprof/$endpoint?seconds=$SECONDS_PROFILED"
wait "$loadpid"

echo "extauthz ${REF:-working tree} $*; $STORE store, $CONSISTENCY, $KEYS keys; concurrency $CONC; load average $(cut -d' ' -f1-3 /proc/loadavg)"
cat "$work/load.txt"
echo
if [ "$KIND" = allocs ]; then
	# The load ran SECONDS_PROFILED + 2 s and the profile covers
	# SECONDS_PROFILED of it: decisions in the profile ~ rps x seconds.
	rps=$(sed -n 's/.* rps=\([0-9]*\).*/\1/p' "$work/load.txt")
	echo "Allocations by function (flat), and per decision at $rps decisions/s over ${SECONDS_PROFILED}s:"
	go tool pprof -sample_index=alloc_objects -top -nodecount=40 "$work/extauthz" "$OUT" 2>/dev/null |
		awk -v d="$((rps * SECONDS_PROFILED))" '/flat%/ {print "per-decision " $0; p=1; next} p {printf "%12.2f %s\n", $1/d, $0}'
	echo
	echo "profile: $OUT (go tool pprof -sample_index=alloc_objects -http=: $OUT)"
	exit 0
fi
echo "Share of CPU time by area (a sample counts for every area on its stack):"
go tool pprof -traces "$OUT" 2>/dev/null | python3 bench/profile_areas.py
echo
echo "Top 25 by cumulative time:"
go tool pprof -top -cum -nodecount=25 "$work/extauthz" "$OUT" 2>/dev/null | sed -n '/flat%/,$p'
echo
echo "profile: $OUT (go tool pprof -http=: $OUT)"
