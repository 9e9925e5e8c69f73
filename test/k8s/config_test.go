package k8s

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"
)

// envVar is one environment variable the binary reads, taken from the
// envconfig tags of cmd/extauthz's Config struct.
type envVar struct {
	Name    string // with the EXTAUTHZ_ prefix
	Type    string // Go type as written: string, bool, int, time.Duration, ...
	Default string
}

const envPrefix = "EXTAUTHZ_"

// configVars parses cmd/extauthz (not its tests) and returns the variables
// of the Config struct by name, following nested structs the way envconfig
// does (prefix_FIELD). The list is never written down twice.
func configVars(t testing.TB) map[string]envVar {
	t.Helper()
	dir := filepath.Join(repoRoot(t), "cmd", "extauthz")
	structs := parseStructs(t, dir)
	cfg, ok := structs["Config"]
	if !ok {
		t.Fatalf("no Config struct in %s", dir)
	}
	vars := map[string]envVar{}
	collectVars(t, structs, cfg, envPrefix, vars)
	if len(vars) == 0 {
		t.Fatal("Config has no envconfig fields")
	}
	return vars
}

// parseStructs returns the struct types declared in the non-test Go files
// of dir, by name.
func parseStructs(t testing.TB, dir string) map[string]*ast.StructType {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	fset := token.NewFileSet()
	structs := map[string]*ast.StructType{}
	for _, e := range entries {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, name), nil, parser.SkipObjectResolution)
		if err != nil {
			t.Fatalf("parse %s: %v", name, err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if ts, ok := n.(*ast.TypeSpec); ok {
				if st, ok := ts.Type.(*ast.StructType); ok {
					structs[ts.Name.Name] = st
				}
			}
			return true
		})
	}
	return structs
}

func collectVars(t testing.TB, structs map[string]*ast.StructType, st *ast.StructType, prefix string, out map[string]envVar) {
	t.Helper()
	for _, field := range st.Fields.List {
		var tag reflect.StructTag
		if field.Tag != nil {
			raw, err := strconv.Unquote(field.Tag.Value)
			if err != nil {
				t.Fatalf("Config tag %s: %v", field.Tag.Value, err)
			}
			tag = reflect.StructTag(raw)
		}
		if tag.Get("ignored") == "true" {
			continue
		}
		typ := exprString(field.Type)
		for _, name := range field.Names {
			if !name.IsExported() {
				continue
			}
			key := tag.Get("envconfig")
			if key == "" {
				key = strings.ToUpper(name.Name)
			}
			// A tag may give the whole name, prefix included (Config's do:
			// envconfig reads them with no prefix of its own).
			full := prefix + key
			if strings.HasPrefix(key, envPrefix) {
				full = key
			}
			if nested, ok := structs[typ]; ok {
				collectVars(t, structs, nested, full+"_", out)
				continue
			}
			out[full] = envVar{Name: full, Type: typ, Default: tag.Get("default")}
		}
	}
}

func exprString(e ast.Expr) string {
	switch v := e.(type) {
	case *ast.Ident:
		return v.Name
	case *ast.SelectorExpr:
		return exprString(v.X) + "." + v.Sel.Name
	case *ast.StarExpr:
		return "*" + exprString(v.X)
	case *ast.ArrayType:
		return "[]" + exprString(v.Elt)
	case *ast.MapType:
		return "map[" + exprString(v.Key) + "]" + exprString(v.Value)
	}
	return "?"
}

// checkValue reports whether value parses as v's type, as envconfig would.
func (v envVar) checkValue(value string) error {
	var err error
	switch strings.TrimPrefix(v.Type, "*") {
	case "time.Duration":
		_, err = time.ParseDuration(value)
	case "bool":
		_, err = strconv.ParseBool(value)
	case "int", "int64", "int32":
		_, err = strconv.ParseInt(value, 0, 64)
	case "uint", "uint64", "uint32":
		_, err = strconv.ParseUint(value, 0, 64)
	case "float64":
		_, err = strconv.ParseFloat(value, 64)
	}
	return err
}

func TestConfigVarsParsed(t *testing.T) {
	t.Parallel()
	vars := configVars(t)
	// The variables the deployment depends on must stay readable by the binary.
	for _, name := range []string{"EXTAUTHZ_GRPC_ADDR", "EXTAUTHZ_HTTP_ADDR", "EXTAUTHZ_CONFIG",
		"EXTAUTHZ_SHUTDOWN_TIMEOUT", "EXTAUTHZ_REDIS_URL"} {
		if _, ok := vars[name]; !ok {
			t.Errorf("cmd/extauthz Config has no %s; the manifests rely on it", name)
		}
	}
	if d := vars["EXTAUTHZ_SHUTDOWN_TIMEOUT"]; d.Type != "time.Duration" {
		t.Errorf("EXTAUTHZ_SHUTDOWN_TIMEOUT has type %s, want time.Duration", d.Type)
	}
}
