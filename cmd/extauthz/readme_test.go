package main

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"
)

// TestREADMEListsEveryVariable keeps the README's configuration table in
// step with Config: the same variables, with the same defaults.
func TestREADMEListsEveryVariable(t *testing.T) {
	t.Parallel()
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	row := regexp.MustCompile("(?m)^\\| `EXTAUTHZ_([A-Z0-9_]+)` \\| ([^|]+) \\|")
	documented := map[string]string{}
	for _, m := range row.FindAllStringSubmatch(string(readme), -1) {
		def := strings.TrimSpace(m[2])
		if def == "(empty)" {
			def = ""
		}
		documented[m[1]] = strings.Trim(def, "`")
	}
	typ := reflect.TypeFor[Config]()
	for i := range typ.NumField() {
		f := typ.Field(i)
		name := f.Tag.Get("envconfig")
		def, ok := documented[name]
		switch {
		case !ok:
			t.Errorf("README lacks EXTAUTHZ_%s", name)
		case def != f.Tag.Get("default"):
			t.Errorf("README gives EXTAUTHZ_%s default %q, config.go %q", name, def, f.Tag.Get("default"))
		}
		delete(documented, name)
	}
	for name := range documented {
		t.Errorf("README lists EXTAUTHZ_%s, which Config does not have", name)
	}
}
