#!/usr/bin/env bash
# bench/scriptcost.sh: Redis time per decision of each algorithm's script,
# from INFO commandstats (usec_per_call of EVALSHA), for decide.lua whole
# (one dispatcher holding all four deciders), the single-algorithm script
# (a request whose limits share one algorithm) and the script a request with
# one limit runs: single.lua for gcra and fixed_window, else the
# single-algorithm script.
#
# Starts its own redis-server on a free loopback port; redis-benchmark sends
# N calls (-c 16 -P 16) over 10,000 keys, a limit never reached; the two
# scripts alternate, ROUNDS times, and the table gives the median.
#
# With BASELINE=<git ref>, a first column gives decide.lua as it was there
# (the "before" of a change to the scripts).
#
# Usage: bench/scriptcost.sh       (N=100000 ROUNDS=3)
#        BASELINE=c75c11d bench/scriptcost.sh
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-100000}
ROUNDS=${ROUNDS:-3}
work=$(mktemp -d)
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
redis-server --port "$port" --bind 127.0.0.1 --save "" --appendonly no --dir "$work" --logfile "$work/redis.log" &
rpid=$!
trap 'kill $rpid 2>/dev/null; wait 2>/dev/null; rm -rf "$work"' EXIT
rcli() { redis-cli -p "$port" "$@"; }
for _ in $(seq 50); do rcli ping >/dev/null 2>&1 && break; sleep 0.1; done

lua=pkg/ratelimit/redisstore/decide.lua
# only ALG: decide.lua without the other algorithms' blocks (as script.go).
only() {
	awk -v keep="$1" '
		/^-- >>> alg / { if ($4 != keep) skip = 1 }
		!skip { print }
		/^-- <<< alg / { if ($4 != keep) skip = 0 }' "$lua"
}
all=$(rcli script load "$(cat "$lua")")
BASELINE=${BASELINE:-}
if [ -n "$BASELINE" ]; then
	base=$(rcli script load "$(git show "$BASELINE:$lua")")
fi
echo "Machine: $(nproc) CPUs, redis $(redis-server --version | awk '{print $3}'), uptime: $(uptime)"
echo
echo "| algorithm |${BASELINE:+ decide.lua at $BASELINE, µs/call |} decide.lua whole, µs/call | single-algorithm script, µs/call | one-limit script, µs/call | one-limit / ${BASELINE:-whole} |"
echo "|---|${BASELINE:+---|}---|---|---|---|"
cost() { # SHA CODE ALG: usec_per_call of N EVALSHA
	rcli config resetstat >/dev/null
	redis-benchmark -p "$port" -q -n "$N" -c 16 -P 16 -r 10000 EVALSHA "$1" 1 \
		"xa:rl:{|bench|user=k__rand_int__}:$3:1000" 1 "" "$2" 1000000000 1000000 0 >/dev/null
	rcli info commandstats | tr -d '\r' | sed -nE 's/^cmdstat_evalsha:.*usec_per_call=([0-9.]+).*/\1/p'
}
median() { tr ' ' '\n' | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'; }
for pair in gcra:1 sliding_log:2 sliding_window:3 fixed_window:4; do
	alg=${pair%:*} code=${pair#*:}
	only=$(rcli script load "$(only "$alg")")
	one=$only
	# single.lua's "single" script: the file without its "batch" block (as script.go).
	case $alg in gcra | fixed_window) one=$(rcli script load "$(awk '/^-- >>> main batch/ {skip = 1} !skip {print} /^-- <<< main batch/ {skip = 0}' pkg/ratelimit/redisstore/single.lua)") ;; esac
	a=() o=() s=() b=()
	for _ in $(seq "$ROUNDS"); do
		[ -n "$BASELINE" ] && b+=("$(cost "$base" "$code" "$alg")")
		a+=("$(cost "$all" "$code" "$alg")")
		s+=("$(cost "$only" "$code" "$alg")")
		o+=("$(cost "$one" "$code" "$alg")")
	done
	ma=$(echo "${a[*]}" | median) ms=$(echo "${s[*]}" | median) mo=$(echo "${o[*]}" | median) ref=$ma
	col=""
	if [ -n "$BASELINE" ]; then
		ref=$(echo "${b[*]}" | median)
		col=" $ref |"
	fi
	echo "| $alg |$col $ma | $ms | $mo | $(awk -v a="$ref" -v o="$mo" 'BEGIN {printf "%.2f×", o / a}') |"
done
echo
echo "uptime at end: $(uptime)"
