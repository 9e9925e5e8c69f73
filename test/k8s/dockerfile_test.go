package k8s

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	Cmd  string // upper case: FROM, RUN, ...
	Args string
	Line int
}

// parseDockerfile splits a Dockerfile into instructions: comment lines
// (also inside a continuation) are dropped, a trailing backslash joins the
// next line.
func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur strings.Builder
	start := 0
	for i, raw := range strings.Split(src, "\n") {
		line := strings.TrimSpace(raw)
		if strings.HasPrefix(line, "#") || (line == "" && cur.Len() == 0) {
			continue
		}
		if cur.Len() == 0 {
			start = i + 1
		}
		if cont, ok := strings.CutSuffix(line, "\\"); ok {
			cur.WriteString(cont + " ")
			continue
		}
		cur.WriteString(line)
		cmd, args, _ := strings.Cut(strings.TrimSpace(cur.String()), " ")
		out = append(out, instruction{Cmd: strings.ToUpper(cmd), Args: strings.TrimSpace(args), Line: start})
		cur.Reset()
	}
	return out
}

// stage is one FROM section of a Dockerfile.
type stage struct {
	From   string // image reference
	Name   string // AS name
	Instrs []instruction
}

func stages(instrs []instruction) []stage {
	var out []stage
	for _, in := range instrs {
		if in.Cmd == "FROM" {
			f := strings.Fields(in.Args)
			f = slices.DeleteFunc(f, func(s string) bool { return strings.HasPrefix(s, "--") })
			s := stage{From: f[0]}
			if len(f) == 3 && strings.EqualFold(f[1], "AS") {
				s.Name = f[2]
			}
			out = append(out, s)
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].Instrs = append(out[len(out)-1].Instrs, in)
		}
	}
	return out
}

func (s stage) all(cmd string) []instruction {
	var out []instruction
	for _, in := range s.Instrs {
		if in.Cmd == cmd {
			out = append(out, in)
		}
	}
	return out
}

// argDefaults returns the ARG defaults visible in a stage (global ARGs
// before the first FROM are ignored: a stage must redeclare them).
func (s stage) argDefaults() map[string]string {
	m := map[string]string{}
	for _, in := range s.all("ARG") {
		for _, a := range strings.Fields(in.Args) {
			name, def, _ := strings.Cut(a, "=")
			m[name] = strings.Trim(def, `"`)
		}
	}
	return m
}

// shellWords splits a POSIX shell command line into words, expanding $VAR
// and ${VAR} from vars outside single quotes. Operators (&&, ;, |, >) are
// refused: the go build line must stay one plain command so that it can be
// read back here.
func shellWords(line string, vars map[string]string) ([]string, error) {
	var words []string
	var cur strings.Builder
	inWord, quote := false, rune(0)
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case quote == '\'' && r != '\'':
			cur.WriteRune(r)
		case r == '\'' || r == '"':
			switch quote {
			case r:
				quote = 0
			case 0:
				quote, inWord = r, true
			default:
				cur.WriteRune(r)
			}
		case r == '\\' && i+1 < len(rs):
			i++
			cur.WriteRune(rs[i])
			inWord = true
		case r == '$':
			name, n := varName(rs[i+1:])
			if name == "" {
				return nil, fmt.Errorf("unsupported $ expansion at %q", string(rs[i:]))
			}
			cur.WriteString(vars[name])
			i += n
			inWord = true
		case quote == 0 && strings.ContainsRune("&;|<>()`", r):
			return nil, fmt.Errorf("shell operator %q: keep `go build` a single plain command", r)
		case quote == 0 && (r == ' ' || r == '\t'):
			if inWord {
				words = append(words, cur.String())
				cur.Reset()
				inWord = false
			}
		default:
			cur.WriteRune(r)
			inWord = true
		}
	}
	if quote != 0 {
		return nil, fmt.Errorf("unterminated %c quote", quote)
	}
	if inWord {
		words = append(words, cur.String())
	}
	return words, nil
}

var plainVar = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*`)

// varName reads the name after a $: {NAME} or NAME; n is how many runes
// it took.
func varName(rs []rune) (name string, n int) {
	s := string(rs)
	if strings.HasPrefix(s, "{") {
		end := strings.IndexByte(s, '}')
		if end < 0 || !plainVar.MatchString(s[1:end]) || len(plainVar.FindString(s[1:end])) != end-1 {
			return "", 0
		}
		return s[1:end], len([]rune(s[:end+1]))
	}
	m := plainVar.FindString(s)
	return m, len([]rune(m))
}

// goBuild is the `go build` command of the Dockerfile's build stage.
type goBuild struct {
	Env    map[string]string // NAME=value words before `go`
	Args   []string          // after `go build`
	Output string            // the -o value
	Line   int
}

// dockerGoBuild finds the RUN with `go build` and reads it back with the
// stage's ARGs expanded (vars override the defaults, as --build-arg would).
func dockerGoBuild(t testing.TB, src string, vars map[string]string) goBuild {
	t.Helper()
	for _, st := range stages(parseDockerfile(src)) {
		for _, in := range st.all("RUN") {
			if !strings.Contains(in.Args, "go build") {
				continue
			}
			env := st.argDefaults()
			for k, v := range vars {
				env[k] = v
			}
			b, err := readGoBuild(in, env)
			if err != nil {
				t.Fatalf("Dockerfile line %d: %v", in.Line, err)
			}
			return b
		}
	}
	t.Fatal("the Dockerfile has no RUN with `go build`")
	return goBuild{}
}

func readGoBuild(in instruction, vars map[string]string) (goBuild, error) {
	cmdline := in.Args
	// RUN flags (--mount=..., --network=...) come before the command.
	for strings.HasPrefix(cmdline, "--") {
		_, cmdline, _ = strings.Cut(cmdline, " ")
		cmdline = strings.TrimSpace(cmdline)
	}
	words, err := shellWords(cmdline, vars)
	if err != nil {
		return goBuild{}, err
	}
	b := goBuild{Env: map[string]string{}, Line: in.Line}
	for len(words) > 0 && plainVar.MatchString(words[0]) && strings.Contains(words[0], "=") {
		k, v, _ := strings.Cut(words[0], "=")
		b.Env[k] = v
		words = words[1:]
	}
	if len(words) < 2 || words[0] != "go" || words[1] != "build" {
		return goBuild{}, fmt.Errorf("expected `go build`, got %q", words)
	}
	b.Args = words[2:]
	for i, a := range b.Args {
		if a == "-o" && i+1 < len(b.Args) {
			b.Output = b.Args[i+1]
		}
	}
	return b, nil
}

// flagValue returns the value of a -flag value pair in args.
func flagValue(args []string, flag string) (string, bool) {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1], true
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v, true
		}
	}
	return "", false
}

func dockerfile(t testing.TB) string {
	t.Helper()
	return string(readFile(t, filepath.Join(repoRoot(t), "Dockerfile")))
}

// TestDockerfileBuildFlags: the build is static, trimmed and versioned.
func TestDockerfileBuildFlags(t *testing.T) {
	t.Parallel()
	b := dockerGoBuild(t, dockerfile(t), map[string]string{"VERSION": "v9.9.9"})
	if b.Env["CGO_ENABLED"] != "0" {
		t.Errorf("CGO_ENABLED=%q, want 0 (a static binary for distroless static)", b.Env["CGO_ENABLED"])
	}
	if !slices.Contains(b.Args, "-trimpath") {
		t.Error("no -trimpath")
	}
	if ld, _ := flagValue(b.Args, "-ldflags"); !strings.Contains(ld, "-X main.version=v9.9.9") {
		t.Errorf("-ldflags %q does not inject VERSION into main.version", ld)
	}
	if b.Output == "" || !slices.Contains(b.Args, "./cmd/extauthz") {
		t.Errorf("go build %q: want -o and ./cmd/extauthz", b.Args)
	}
}

// TestDockerfileRuntimeImage: minimal, non-root, exec-form entrypoint (so
// SIGTERM reaches the process), the binary's ports exposed, the example
// policy shipped where EXTAUTHZ_CONFIG points.
func TestDockerfileRuntimeImage(t *testing.T) {
	t.Parallel()
	sts := stages(parseDockerfile(dockerfile(t)))
	if len(sts) < 2 {
		t.Fatalf("%d stages, want a build stage and a runtime stage", len(sts))
	}
	final := sts[len(sts)-1]
	if !strings.HasPrefix(final.From, "gcr.io/distroless/static") && final.From != "scratch" {
		t.Errorf("runtime image %s: want distroless static or scratch", final.From)
	}
	checkUser(t, final)
	checkExpose(t, final)
	entry := checkEntrypoint(t, final)
	copies := copyDestinations(t, final)
	if copies["/out/extauthz"] != entry {
		t.Errorf("ENTRYPOINT %s is not the binary copied from the build stage (%v)", entry, copies)
	}
	vars := configVars(t)
	for _, in := range final.all("ENV") {
		name, value, _ := strings.Cut(in.Args, "=")
		if _, ok := vars[name]; strings.HasPrefix(name, envPrefix) && !ok {
			t.Errorf("ENV %s is not a Config field", name)
		}
		if name == "EXTAUTHZ_CONFIG" && strings.TrimSuffix(copies["examples/policy/"], "/") != value {
			t.Errorf("EXTAUTHZ_CONFIG=%s, but examples/policy is copied to %s", value, copies["examples/policy/"])
		}
	}
}

func checkUser(t *testing.T, st stage) {
	t.Helper()
	users := st.all("USER")
	if len(users) == 0 {
		t.Fatal("runtime stage sets no USER")
	}
	uid, _, _ := strings.Cut(users[len(users)-1].Args, ":")
	if n, err := strconv.Atoi(uid); err != nil || n == 0 {
		t.Errorf("USER %s: want a numeric non-root UID (runAsNonRoot can only verify numbers)", users[len(users)-1].Args)
	}
}

func checkExpose(t *testing.T, st stage) {
	t.Helper()
	var exposed []string
	for _, in := range st.all("EXPOSE") {
		exposed = append(exposed, strings.Fields(in.Args)...)
	}
	vars := configVars(t)
	for _, name := range []string{"EXTAUTHZ_GRPC_ADDR", "EXTAUTHZ_HTTP_ADDR"} {
		p, err := addrPort(vars[name].Default)
		if err != nil {
			t.Fatalf("%s default: %v", name, err)
		}
		if !slices.Contains(exposed, strconv.Itoa(int(p))) {
			t.Errorf("EXPOSE %v lacks %d (%s default)", exposed, p, name)
		}
	}
}

func checkEntrypoint(t *testing.T, st stage) string {
	t.Helper()
	eps := st.all("ENTRYPOINT")
	if len(eps) != 1 {
		t.Fatalf("%d ENTRYPOINTs in the runtime stage, want 1", len(eps))
	}
	var argv []string
	if err := json.Unmarshal([]byte(eps[0].Args), &argv); err != nil || len(argv) == 0 {
		t.Fatalf("ENTRYPOINT %s: want the exec (JSON) form, so that SIGTERM reaches extauthz", eps[0].Args)
	}
	return argv[0]
}

// copyDestinations maps each COPY source of a stage to its destination;
// a source from another stage is keyed by its path there.
func copyDestinations(t *testing.T, st stage) map[string]string {
	t.Helper()
	m := map[string]string{}
	for _, in := range st.all("COPY") {
		f := slices.DeleteFunc(strings.Fields(in.Args), func(s string) bool { return strings.HasPrefix(s, "--") })
		if len(f) < 2 {
			t.Fatalf("COPY %s", in.Args)
		}
		for _, src := range f[:len(f)-1] {
			m[src] = f[len(f)-1]
		}
	}
	return m
}

// TestShellWords pins the reader the build test depends on.
func TestShellWords(t *testing.T) {
	t.Parallel()
	vars := map[string]string{"V": "1.2", "OS": "linux"}
	got, err := shellWords(`A=0 GOOS=${OS} go build -ldflags "-s -X main.version=$V" -o '/o $V' ./x`, vars)
	want := []string{"A=0", "GOOS=linux", "go", "build", "-ldflags", "-s -X main.version=1.2", "-o", "/o $V", "./x"}
	if err != nil || !slices.Equal(got, want) {
		t.Errorf("shellWords = %q, %v; want %q", got, err, want)
	}
	for _, bad := range []string{"go build && rm -rf /", "go build; true", `go build "x`, "go build $(pwd)"} {
		if _, err := shellWords(bad, vars); err == nil {
			t.Errorf("shellWords(%q) accepted", bad)
		}
	}
}
