"""Splits a Go CPU profile by area. Reads `go tool pprof -traces` on stdin
and prints, per area, its self share (each sample goes to the area of the
innermost frame that belongs to one, so these add up to 100 %) and its
inclusive share (samples whose stack passes through the area at all)."""
import re
import sys

# Checked in order against each frame, innermost first.
AREAS = [
    ("syscalls", r"^(syscall\.|internal/runtime/syscall|internal/poll\.|runtime\.netpoll)"),
    ("GC and allocation", r"^runtime\.(gc|mallocgc|scanobject|markroot|greyobject|sweep|bgsweep|memclr|newobject|makeslice|growslice|mallocgc)"),
    ("Go scheduler and other runtime", r"^runtime\."),
    ("protobuf (un)marshal", r"^(google\.golang\.org/protobuf|github\.com/extauthz/extauthz/pkg/envoy\.(\(\*?[Cc]odec\)|UnmarshalLenient))"),
    ("go-redis", r"^github\.com/redis/go-redis"),
    ("gRPC and HTTP/2", r"^(google\.golang\.org/grpc|golang\.org/x/net/http2)"),
    ("Prometheus metrics", r"^github\.com/prometheus"),
    ("rate-limit store (redisstore)", r"^github\.com/extauthz/extauthz/pkg/ratelimit/redisstore"),
    ("extauthz decision code", r"^github\.com/extauthz/extauthz/"),
]
OTHER = "other (stdlib, ...)"
UNITS = {"ns": 1e-9, "us": 1e-6, "\u00b5s": 1e-6, "ms": 1e-3, "s": 1.0}
SAMPLE = re.compile(r"^\s*([0-9.]+)(ns|us|\u00b5s|ms|s)\s+(\S+)")


def stacks(lines):
    """Yields (seconds, [function, ...]) per trace, innermost frame first."""
    value, stack = 0.0, []
    for line in lines:
        if line.startswith("-----------+"):
            if stack:
                yield value, stack
            value, stack = 0.0, []
            continue
        m = SAMPLE.match(line)
        if m:
            value = float(m.group(1)) * UNITS[m.group(2)]
            stack = [m.group(3)]
        elif stack and line.strip():
            stack.append(line.split()[0])
    if stack:
        yield value, stack


def area_of(frame):
    for name, rx in AREAS:
        if re.search(rx, frame):
            return name
    return None


def main():
    names = [n for n, _ in AREAS] + [OTHER]
    total = 0.0
    self_, incl = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0.0)
    for value, stack in stacks(sys.stdin):
        total += value
        areas = [area_of(f) for f in stack]
        self_[next((a for a in areas if a), OTHER)] += value
        for a in set(a for a in areas if a):
            incl[a] += value
    print("  %-32s %7s %10s" % ("area", "self", "inclusive"))
    for n in names:
        if total:
            print("  %-32s %6.1f%% %9.1f%%" % (n, 100 * self_[n] / total, 100 * incl[n] / total))


if __name__ == "__main__":
    main()
