package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/extauthz/extauthz/pkg/idempotency"
)

// labelDoc is how the code marks a const group as the values of one
// metric's label: `the "outcome" label of extauthz_decisions_total`.
var labelDoc = regexp.MustCompile(`the "([a-z_]+)" label of (extauthz_[a-z_]+)`)

// codeLabelValues reads, from the Go source under pkg/ (any subpackage),
// every value the code can give a documented metric label: the string
// constants of const groups whose comment names the label (labelDoc), and
// the literal reasons passed to Metrics.Invalid, and every string constant
// of type idempotency.Event (or conversion to it) anywhere under pkg/, so
// that an event declared outside pkg/idempotency's list (the replay
// endpoint's) is held to docs/reference.md too. Source rather than
// imports, so that moving the constants between packages keeps the check.
func codeLabelValues(t *testing.T) map[string]map[string][]string {
	t.Helper()
	out := map[string]map[string][]string{}
	add := func(metric, label, v string) {
		if out[metric] == nil {
			out[metric] = map[string][]string{}
		}
		out[metric][label] = append(out[metric][label], v)
	}
	fset := token.NewFileSet()
	err := filepath.WalkDir("../../pkg", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ParseComments)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.GenDecl:
				m := labelDoc.FindStringSubmatch(strings.Join(strings.Fields(n.Doc.Text()), " "))
				if n.Tok != token.CONST || m == nil {
					return true
				}
				for _, v := range stringConsts(n) {
					add(m[2], m[1], v)
				}
			case *ast.ValueSpec:
				// Every typed constant of idempotency.Event, in any package
				// (the replay endpoint declares its own): all are counted.
				for _, v := range n.Values {
					if s, ok := stringLit(v); ok && isEventType(f.Name.Name, n.Type) {
						add("extauthz_idempotency_events_total", "event", s)
					}
				}
			case *ast.CallExpr:
				if s, ok := lastStringArg(n, 1); ok && isEventType(f.Name.Name, n.Fun) {
					add("extauthz_idempotency_events_total", "event", s)
				}
				if sel, ok := n.Fun.(*ast.SelectorExpr); ok && sel.Sel.Name == "Invalid" {
					if s, ok := lastStringArg(n, 2); ok {
						add("extauthz_invalid_requests_total", "reason", s)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range idempotency.Events() {
		add("extauthz_idempotency_events_total", "event", string(e))
	}
	return out
}

// stringLit returns the value of a string literal.
func stringLit(e ast.Expr) (string, bool) {
	lit, ok := e.(*ast.BasicLit)
	if !ok || lit.Kind != token.STRING {
		return "", false
	}
	s, err := strconv.Unquote(lit.Value)
	return s, err == nil
}

// lastStringArg returns the last argument of a call with n arguments when
// it is a string literal.
func lastStringArg(c *ast.CallExpr, n int) (string, bool) {
	if len(c.Args) != n {
		return "", false
	}
	return stringLit(c.Args[n-1])
}

// isEventType reports whether e, in a file of package pkg, names the
// idempotency event type: Event inside package idempotency,
// idempotency.Event elsewhere.
func isEventType(pkg string, e ast.Expr) bool {
	switch e := e.(type) {
	case *ast.Ident:
		return pkg == "idempotency" && e.Name == "Event"
	case *ast.SelectorExpr:
		x, ok := e.X.(*ast.Ident)
		return ok && x.Name == "idempotency" && e.Sel.Name == "Event"
	}
	return false
}

// stringConsts returns the string literal values of a const group.
func stringConsts(d *ast.GenDecl) []string {
	var out []string
	for _, s := range d.Specs {
		for _, v := range s.(*ast.ValueSpec).Values {
			if lit, ok := v.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				u, _ := strconv.Unquote(lit.Value)
				out = append(out, u)
			}
		}
	}
	return out
}

var (
	// metricRow is a docs/reference.md metrics table row: name and meaning.
	metricRow = regexp.MustCompile("(?m)^\\| `(extauthz_[a-z0-9_]+)` \\|[^|]*\\| (.*) \\|$")
	// remark is a parenthesised remark, dropped before reading a list
	// (innermost first, repeatedly, for nested ones).
	remark = regexp.MustCompile(`\s*\([^()]*\)`)
)

// readmeLabelValues reads the values docs/reference.md lists for label in a
// metric's meaning: after "`label`" (and an optional colon), the
// backquoted words separated by commas, parenthesised remarks left out.
func readmeLabelValues(meaning, label string) []string {
	for s := ""; s != meaning; {
		s, meaning = meaning, remark.ReplaceAllString(meaning, "")
	}
	_, rest, ok := strings.Cut(meaning, "`"+label+"`")
	if !ok {
		return nil
	}
	var out []string
	for {
		rest = strings.TrimLeft(rest, " :")
		if !strings.HasPrefix(rest, "`") {
			return out
		}
		v, after, _ := strings.Cut(rest[1:], "`")
		out = append(out, v)
		rest, ok = strings.CutPrefix(after, ",")
		if !ok {
			return out
		}
	}
}

// TestMetricLabelValuesMatchREADME: for every label whose values the code
// declares (labelDoc groups, Invalid reasons, idempotency events), the
// the reference's row for that metric lists exactly those values: none the code
// can emit is missing, none listed is impossible.
func TestMetricLabelValuesMatchREADME(t *testing.T) {
	t.Parallel()
	_, readme := readmeMetrics(t)
	meanings := map[string]string{}
	for _, m := range metricRow.FindAllStringSubmatch(readme, -1) {
		meanings[m[1]] = m[2]
	}
	code := codeLabelValues(t)
	for _, want := range []string{"extauthz_decisions_total outcome", "extauthz_rule_hits_total stat",
		"extauthz_invalid_requests_total reason", "extauthz_idempotency_events_total event"} {
		metric, label, _ := strings.Cut(want, " ")
		if len(code[metric][label]) == 0 {
			t.Errorf("found no values of %s{%s} in pkg/: the marker comment (%s) is gone", metric, label, labelDoc)
		}
	}
	for metric, labels := range code {
		for label, values := range labels {
			listed := readmeLabelValues(meanings[metric], label)
			slices.Sort(values)
			values = slices.Compact(values)
			slices.Sort(listed)
			if !slices.Equal(values, listed) {
				t.Errorf("docs/reference.md lists %s{%s} values %q; the code can emit %q", metric, label, listed, values)
			}
		}
	}
}

func TestReadmeLabelValues(t *testing.T) {
	t.Parallel()
	got := readmeLabelValues("by `api` (`a`) and `event`: `x`, `y` (`not`, (nested `z`)), `w`. `v`", "event")
	if want := []string{"x", "y", "w"}; !slices.Equal(got, want) {
		t.Errorf("got %q, want %q", got, want)
	}
}
