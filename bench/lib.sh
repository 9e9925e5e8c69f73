# Shared by the bench scripts (source it after `cd` to the repository root):
# a scratch directory and background processes removed on exit, a free
# loopback port, a process's CPU time in clock ticks, a throwaway Redis
# and the bench policy.
work=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT

freeport() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }
cputicks() { awk '{print $14 + $15}' "/proc/$1/stat"; }
# stealticks: the machine's steal and total clock ticks so far ("steal total"),
# from /proc/stat; steal_pct BEFORE AFTER: the share of the time between two
# readings that the hypervisor gave to others (a run slowed by a neighbour
# shows here, not in our own CPU counts).
stealticks() { awk '/^cpu /{t = 0; for (i = 2; i <= NF; i++) t += $i; print $9 "," t}' /proc/stat; }
steal_pct() { awk -v a="$1" -v b="$2" 'BEGIN{split(a, x, ","); split(b, y, ","); d = y[2] - x[2]; printf "%.1f", (d > 0 ? 100 * (y[1] - x[1]) / d : 0)}'; }
hz=$(getconf CLK_TCK)

# start_redis: a throwaway redis-server on a free loopback port (never
# 6379), no persistence; sets rport and rpid and waits until it answers.
start_redis() {
	rport=$(freeport)
	redis-server --port "$rport" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" \
		--logfile "$work/redis.log" &
	rpid=$!
	pids+=("$rpid")
	for _ in $(seq 50); do redis-cli -p "$rport" ping >/dev/null 2>&1 && break; sleep 0.1; done
}

# write_bench_policy DIR: domain "bench", one descriptor key "user" whose
# limit (fixed_window, 1e9/s) is never reached.
write_bench_policy() {
	mkdir -p "$1"
	cat >"$1/bench.yaml" <<'YAML'
domain: bench
descriptors:
  - key: user
    rate_limit: {unit: second, requests_per_unit: 1000000000, algorithm: fixed_window}
YAML
}
