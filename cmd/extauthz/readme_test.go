package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// readmeVariable is one row of the reference's configuration table.
type readmeVariable struct {
	def, meaning string
}

// readmeVariables parses the reference's configuration table, by variable
// name without the EXTAUTHZ_ prefix.
func readmeVariables(t *testing.T) map[string]readmeVariable {
	t.Helper()
	readme, err := os.ReadFile("../../docs/reference.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `EXTAUTHZ_([A-Z0-9_]+)` \\| ([^|]+) \\| (.*) \\|$")
	out := map[string]readmeVariable{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		def := strings.TrimSpace(m[2])
		if def == "(empty)" {
			def = ""
		}
		out[m[1]] = readmeVariable{def: strings.Trim(def, "`"), meaning: m[3]}
	}
	if len(out) == 0 {
		t.Fatal("no configuration table in docs/reference.md")
	}
	return out
}

// TestREADMEListsEveryVariable keeps the reference's configuration table in
// step with Config: the same variables, with the same defaults.
func TestREADMEListsEveryVariable(t *testing.T) {
	t.Parallel()
	documented := readmeVariables(t)
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := strings.TrimPrefix(varName(f), envPrefix)
		v, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("docs/reference.md lacks EXTAUTHZ_%s", name)
		case v.def != f.Tag.Get("default"):
			t.Errorf("docs/reference.md gives EXTAUTHZ_%s default %q, config.go %q", name, v.def, f.Tag.Get("default"))
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("docs/reference.md lists EXTAUTHZ_%s, which Config does not have", name)
	}
}

var (
	// interval is a ratio's range as the rules and docs/reference.md write it.
	interval = regexp.MustCompile(`[(\[]\d+(?:\.\d+)?, \d+(?:\.\d+)?[)\]]`)
	// numberRange is "A to B" in a rule; docs/reference.md writes it "A–B".
	numberRange = regexp.MustCompile(`(\d+) to (\d+)`)
	// aside is a parenthesised remark in a rule, such as what 0 means.
	aside = regexp.MustCompile(`\s*\([^()]*\)`)
)

// ruleBounds returns the ranges a rule's accepted values have, as the
// docs/reference.md must state them: an interval such as "(0, 1]" verbatim, and
// "A to B" as "A–B" (an en dash).
func ruleBounds(want string) []string {
	out := interval.FindAllString(want, -1)
	for _, m := range numberRange.FindAllStringSubmatch(aside.ReplaceAllString(want, ""), -1) {
		out = append(out, m[1]+"–"+m[2])
	}
	return out
}

// TestREADMEStatesEveryRange: where Config.rules bounds a variable on both
// sides, the variable's docs/reference.md row states the same bounds, so that the
// table cannot promise a range the process refuses (or the reverse).
func TestREADMEStatesEveryRange(t *testing.T) {
	t.Parallel()
	documented := readmeVariables(t)
	cfg := Config{}
	checked := 0
	for _, r := range append(cfg.rules(), cfg.blobRules()...) {
		for _, b := range ruleBounds(r.want) {
			checked++
			if v, ok := documented[r.name]; ok && !strings.Contains(v.meaning, b) {
				t.Errorf("docs/reference.md row of EXTAUTHZ_%s does not state %s (the code accepts %s)", r.name, b, r.want)
			}
		}
	}
	if checked < 8 {
		t.Errorf("found %d bounded ranges in Config.rules; the parser has lost them", checked)
	}
}

func TestRuleBounds(t *testing.T) {
	t.Parallel()
	for want, bounds := range map[string][]string{
		"a ratio in (0, 1], e.g. 0.8":                      {"(0, 1]"},
		"0 (go-redis's default, 10 per CPU) to 10000":      {"0–10000"},
		"0 or 1 (no coalescing) to 4096":                   {"1–4096"},
		"0 (the default, 17825792) or 65536 to 1073741824": {"65536–1073741824"},
		"a duration above 0, e.g. 10s":                     nil,
	} {
		if got := ruleBounds(want); !reflect.DeepEqual(got, bounds) {
			t.Errorf("ruleBounds(%q) = %q, want %q", want, got, bounds)
		}
	}
}
