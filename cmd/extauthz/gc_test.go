package main

import (
	"errors"
	"io/fs"
	"strings"
	"testing"
)

// cgroupFiles fakes os.ReadFile over a map of cgroup files.
func cgroupFiles(files map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		if v, ok := files[name]; ok {
			return []byte(v), nil
		}
		return nil, fs.ErrNotExist
	}
}

func env(vars map[string]string) func(string) string {
	return func(k string) string { return vars[k] }
}

func TestChooseGC(t *testing.T) {
	const v2, v1 = "/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"
	for _, tc := range []struct {
		name  string
		env   map[string]string
		files map[string]string
		want  gcSettings
	}{
		{"bare metal: GOGC default, no limit", nil, nil, gcSettings{percent: defaultGCPercent}},
		{"cgroup v2 limit", nil, map[string]string{v2: "268435456\n"}, gcSettings{defaultGCPercent, 241591910}},
		{"cgroup v2 unlimited", nil, map[string]string{v2: "max\n"}, gcSettings{percent: defaultGCPercent}},
		{"cgroup v1 limit", nil, map[string]string{v1: "536870912\n"}, gcSettings{defaultGCPercent, 483183820}},
		{"cgroup v1 unlimited", nil, map[string]string{v1: "9223372036854771712\n"}, gcSettings{percent: defaultGCPercent}},
		{"v2 wins over v1", nil, map[string]string{v2: "1000", v1: "2000"}, gcSettings{defaultGCPercent, 900}},
		{"garbage", nil, map[string]string{v2: "lots"}, gcSettings{percent: defaultGCPercent}},
		{"operator's GOGC wins", map[string]string{"GOGC": "100"}, map[string]string{v2: "1000"}, gcSettings{memoryLimit: 900}},
		{"operator's GOGC=off wins", map[string]string{"GOGC": "off"}, nil, gcSettings{}},
		{"operator's GOMEMLIMIT wins", map[string]string{"GOMEMLIMIT": "100MiB"}, map[string]string{v2: "1000"}, gcSettings{percent: defaultGCPercent}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := chooseGC(env(tc.env), cgroupFiles(tc.files)); got != tc.want {
				t.Errorf("chooseGC = %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestContainerMemoryLimitUnreadable(t *testing.T) {
	failing := func(string) ([]byte, error) { return nil, errors.New("permission denied") }
	if got := containerMemoryLimit(failing); got != 0 {
		t.Errorf("containerMemoryLimit = %d with no readable file, want 0", got)
	}
}

// TestBinaryTunesTheCollector reads the runtime's own settings back from
// /metrics (go_gc_gogc_percent): 400 when GOGC is unset, the operator's
// value when set.
func TestBinaryTunesTheCollector(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"GOGC=", "go_gc_gogc_percent 400\n"},
		{"GOGC=150", "go_gc_gogc_percent 150\n"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			p := start(t, tc.env)
			code, body := p.get(t, "/metrics")
			if code != 200 || !strings.Contains(body, tc.want) {
				t.Errorf("/metrics with %s: status %d, want a line %q", tc.env, code, tc.want)
			}
		})
	}
}
