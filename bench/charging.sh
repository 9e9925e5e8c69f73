#!/usr/bin/env bash
# charging.sh: what the peer's counting costs. The same extauthz on the same
# Redis, ShouldRateLimit on a fixed_window limit never reached, with
# EXTAUTHZ_RLS_CHARGE=if_admitted (ours: the batched single-limit script)
# and =always (envoyproxy/ratelimit's counting, the default where its users
# configure us: the general decide script). ROUNDS rounds, the order of the
# two modes alternating, DURATION each; prints one table row per run.
set -euo pipefail
cd "$(dirname "$0")/.."

DURATION=${DURATION:-8s}
ROUNDS=${ROUNDS:-4}
CONC=${CONC:-64}
. bench/lib.sh # work, pids, cleanup, freeport, cputicks, hz

go build -o "$work/extauthz" ./cmd/extauthz
go build -o "$work/extauthz-load" ./cmd/extauthz-load
start_redis
write_bench_policy "$work/policy"

# run MODE: one extauthz in MODE, warmed up, then one measured load.
run() {
	local mode=$1 gport hport xpid x0 r0 x1 r1 out
	gport=$(freeport)
	hport=$(freeport)
	EXTAUTHZ_GRPC_ADDR="127.0.0.1:$gport" EXTAUTHZ_HTTP_ADDR="127.0.0.1:$hport" EXTAUTHZ_DRAIN_DELAY=0s \
		EXTAUTHZ_CONFIG="$work/policy" EXTAUTHZ_REDIS_URL="redis://127.0.0.1:$rport" EXTAUTHZ_RLS_CHARGE="$mode" \
		EXTAUTHZ_LOG_LEVEL=warn "$work/extauthz" 2>"$work/$mode.log" &
	xpid=$!
	for _ in $(seq 100); do
		curl -fsS "http://127.0.0.1:$hport/readyz" >/dev/null 2>&1 && break
		sleep 0.1
	done
	"$work/extauthz-load" -addr "127.0.0.1:$gport" -domain bench -keys 10000 -concurrency "$CONC" -duration 1s >/dev/null
	x0=$(cputicks "$xpid")
	r0=$(cputicks "$rpid")
	out=$("$work/extauthz-load" -addr "127.0.0.1:$gport" -domain bench -keys 10000 -concurrency "$CONC" -duration "$DURATION" -json)
	x1=$(cputicks "$xpid")
	r1=$(cputicks "$rpid")
	kill "$xpid" && wait "$xpid" 2>/dev/null || true
	jq -r --arg mode "$mode" --argjson x "$((x1 - x0))" --argjson r "$((r1 - r0))" --argjson hz "$hz" '
		"| \($mode) | \(.requests_per_second | floor) | \(.p50_ns / 1000 | floor) µs | \(.p99_ns / 1000 | floor) µs | \(.errors) | \(if .requests > 0 then ($x * 1e6 / $hz / .requests | floor) else 0 end) µs | \(if .requests > 0 then ($r * 1e6 / $hz / .requests | floor) else 0 end) µs |"' <<<"$out"
}

echo "Machine: $(nproc) CPUs, load average at start: $(cut -d' ' -f1-3 /proc/loadavg); $DURATION per run, concurrency $CONC, 10,000 keys"
echo
echo "| EXTAUTHZ_RLS_CHARGE | requests/s | p50 | p99 | errors | extauthz CPU/req | Redis CPU/req |"
echo "|---|---|---|---|---|---|---|"
for i in $(seq "$ROUNDS"); do
	if [ $((i % 2)) = 1 ]; then order="if_admitted always"; else order="always if_admitted"; fi
	for mode in $order; do run "$mode"; done
done
