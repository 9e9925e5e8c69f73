package main

import (
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
)

// defaultGCPercent is the GOGC extauthz runs with when the operator sets
// none. Its live heap is a few MB (policy, metrics, gRPC buffers), so Go's
// default of 100 with its 4 MB minimum goal collects about 30 times a
// second at 10,000 decisions/s: measured at concurrency 64 on Redis
// (docs/benchmarks-redis.md), 400 cut server CPU per decision by 4-16%
// for some 10 MB more heap. The memory limit below keeps a large
// heap (an embedded store holding many counters) from growing 5× unchecked.
const defaultGCPercent = 400

// memoryLimitShare is the part of the container's memory limit given to
// the Go heap as GOMEMLIMIT; the rest is for stacks, buffers outside the
// heap and the runtime itself.
const memoryLimitShare = 0.9

// cgroupMemoryFiles are where a container's memory limit is read: cgroup v2
// first, then v1.
var cgroupMemoryFiles = []string{
	"/sys/fs/cgroup/memory.max",
	"/sys/fs/cgroup/memory/memory.limit_in_bytes",
}

// gcSettings is what tuneGC applies; zero fields are left as they are.
type gcSettings struct {
	percent     int   // GOGC, when the environment sets none
	memoryLimit int64 // GOMEMLIMIT in bytes, when the environment sets none
}

// chooseGC decides the collector settings from the environment and the
// cgroup files: the operator's GOGC and GOMEMLIMIT always win.
func chooseGC(getenv func(string) string, readFile func(string) ([]byte, error)) gcSettings {
	var s gcSettings
	if getenv("GOGC") == "" {
		s.percent = defaultGCPercent
	}
	if getenv("GOMEMLIMIT") == "" {
		if limit := containerMemoryLimit(readFile); limit > 0 {
			s.memoryLimit = int64(float64(limit) * memoryLimitShare)
		}
	}
	return s
}

// containerMemoryLimit is the cgroup memory limit in bytes, or 0 when there
// is none ("max", v1's page-rounded MaxInt64, no file, or garbage).
func containerMemoryLimit(readFile func(string) ([]byte, error)) int64 {
	for _, f := range cgroupMemoryFiles {
		b, err := readFile(f)
		if err != nil {
			continue
		}
		n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
		if err != nil || n <= 0 || n > math.MaxInt64/2 {
			return 0
		}
		return n
	}
	return 0
}

// tuneGC applies chooseGC's settings to the runtime and logs them.
func tuneGC(log *slog.Logger) {
	s := chooseGC(os.Getenv, os.ReadFile)
	if s.percent != 0 {
		debug.SetGCPercent(s.percent)
	}
	if s.memoryLimit != 0 {
		debug.SetMemoryLimit(s.memoryLimit)
	}
	gogc := os.Getenv("GOGC")
	if s.percent != 0 {
		gogc = strconv.Itoa(s.percent)
	}
	// SetMemoryLimit with a negative value only reads the limit.
	log.Info("garbage collector", "gogc", gogc, "gomemlimit_bytes", debug.SetMemoryLimit(-1))
}

// goRuntimeEnvErrors checks the Go runtime's variables beside ours: the
// runtime reads GOGC before main and silently takes its default (100, not
// our 400) for a value it cannot parse, so such a value stops the process
// here like any bad setting.
//
// GOMEMLIMIT is not here because no code of ours ever sees a bad one: the
// runtime parses it while it starts, before main or any init, and throws
// ("fatal error: malformed GOMEMLIMIT", a stack trace, exit 2).
// TestBadGOMEMLIMITDiesInTheRuntime pins that.
func goRuntimeEnvErrors(lookup func(string) (string, bool)) error {
	if v, ok := lookup("GOGC"); ok && v != "" && !validGOGC(v) {
		return fmt.Errorf("GOGC=%q: want off, or a whole percentage such as 100 (unset: extauthz's %d)", v, defaultGCPercent)
	}
	return nil
}

// validGOGC accepts what the runtime honours: "off", or a decimal int32
// with an optional minus sign (a negative one turns the collector off).
func validGOGC(v string) bool {
	if v == "off" {
		return true
	}
	_, err := strconv.ParseInt(v, 10, 32)
	return err == nil && !strings.HasPrefix(v, "+")
}
