package main

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
)

// envoyproxy/ratelimit's settings ("the peer's", src/settings/settings.go),
// translated onto ours so that extauthz starts where the peer's deployment
// (Envoy Gateway's) runs it with nothing else changed. Nothing below cmd/
// knows these names; docs/reference.md's "envoyproxy/ratelimit's settings"
// table lists the same rows (TestPeerTableMatchesDocs).

// peerClass says what extauthz does with one of the peer's variables.
type peerClass string

const (
	// peerMapped feeds the EXTAUTHZ_* variables of the peerMappings that
	// read it.
	peerMapped peerClass = "mapped"
	// peerWarned has no meaning here: set (to other than a harmless value),
	// extauthz starts and logs one warning line naming it.
	peerWarned peerClass = "warned"
	// peerRefused would change decisions if ignored: set (to other than a
	// harmless value), extauthz refuses to start with one line.
	peerRefused peerClass = "refused"
	// peerXDS is mapped as peerMapped, but read only with
	// CONFIG_TYPE=GRPC_XDS_SOTW, as the peer reads it.
	peerXDS peerClass = "xDS"
)

// peerMarkers are peer-only names whose presence means "configured as the
// peer" even when the binary is not started as ratelimit. Generic names
// (PORT, LOG_LEVEL, REDIS_URL) are not: a pod may hold them for others.
var peerMarkers = []string{"CONFIG_TYPE", "RUNTIME_ROOT", "USE_STATSD"}

// peerMode reports whether the peer's names apply: started as ratelimit
// (Envoy Gateway runs /bin/ratelimit), or a marker set.
func peerMode(argv0 string, lookup peerLookup) bool {
	if path.Base(filepath.ToSlash(argv0)) == "ratelimit" {
		return true
	}
	return slices.ContainsFunc(peerMarkers, func(name string) bool { _, ok := lookup(name); return ok })
}

// peerEnv translates the peer's variables: our variables (without the
// EXTAUTHZ_ prefix) with what each came from, one warning line per
// variable with no meaning here, and one error line per refused one.
type peerEnv struct {
	values   map[string]string
	from     map[string][]string
	warnings []string
	refusals []error
}

func translatePeer(lookup peerLookup) peerEnv {
	e := peerEnv{values: map[string]string{}, from: map[string][]string{}}
	for _, v := range peerVars {
		val, ok := lookup(v.name)
		if !ok || v.harmless != nil && v.harmless(val) {
			continue
		}
		switch v.class {
		case peerWarned:
			e.warnings = append(e.warnings, fmt.Sprintf("%s is ignored: %s", v.name, v.why))
		case peerRefused:
			e.refusals = append(e.refusals, fmt.Errorf("%s=%q: refused: %s", v.name, val, v.why))
		}
	}
	for _, m := range peerMappings {
		if slices.IndexFunc(m.to, func(name string) bool { _, ok := lookup("EXTAUTHZ_" + name); return !ok }) < 0 {
			continue // ours give every one of its variables
		}
		out, err := m.fn(lookup)
		if err != nil {
			if !slices.ContainsFunc(e.refusals, func(r error) bool { return r.Error() == err.Error() }) { // a flag two mappings read
				e.refusals = append(e.refusals, err)
			}
			continue
		}
		for k, val := range out {
			e.values[k] = val
			e.from[k] = m.from
		}
	}
	return e
}

// exportPeerEnv, where the peer's names apply (peerMode), translates them
// and sets each resulting EXTAUTHZ_* variable that is unset in the process
// environment, where envconfig reads ours: our names win when both are
// given. It runs in main before anything else reads the environment.
func exportPeerEnv(argv0 string) (peerEnv, error) {
	if !peerMode(argv0, os.LookupEnv) {
		return peerEnv{}, nil
	}
	peer := translatePeer(os.LookupEnv)
	for name := range peer.values {
		if _, ok := os.LookupEnv(envPrefix + name); ok { // ours win
			delete(peer.values, name)
			delete(peer.from, name)
		}
	}
	if err := errors.Join(peer.refusals...); err != nil {
		return peer, err
	}
	for name, v := range peer.values {
		if err := os.Setenv(envPrefix+name, v); err != nil {
			return peer, fmt.Errorf("%s%s from envoyproxy/ratelimit's %s: %w", envPrefix, name, strings.Join(peer.from[name], ", "), err)
		}
	}
	return peer, nil
}

// annotate names, on each line of err about one of our variables that a
// peer's variable set, where its value came from.
func (e peerEnv) annotate(err error) error {
	if err == nil || len(e.from) == 0 {
		return err
	}
	lines := strings.Split(err.Error(), "\n")
	for i, line := range lines {
		name, _, _ := strings.Cut(strings.TrimPrefix(line, "EXTAUTHZ_"), "=")
		if from, ok := e.from[name]; ok && strings.HasPrefix(line, "EXTAUTHZ_") {
			lines[i] = fmt.Sprintf("%s (from envoyproxy/ratelimit's %s)", line, strings.Join(from, ", "))
		}
	}
	return errors.New(strings.Join(lines, "\n"))
}

// peerTargets lists, sorted, our variables (with the prefix) that name
// feeds: the "extauthz" column of docs/reference.md's table.
func peerTargets(name string) []string {
	var out []string
	for _, m := range peerMappings {
		if slices.Contains(m.from, name) {
			for _, to := range m.to {
				out = append(out, "EXTAUTHZ_"+to)
			}
		}
	}
	slices.Sort(out)
	return slices.Compact(out)
}
