package policy

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/extauthz/extauthz/pkg/ratelimit"
)

// Load reads and validates a policy: path is one YAML file, or a directory
// whose *.yaml and *.yml files (not its subdirectories, not hidden names)
// are loaded together. Hidden names are skipped so that a Kubernetes
// ConfigMap mount, whose real files sit under "..data" and "..2026_..."
// directories behind visible symlinks, is read once, through the symlinks.
//
// The error, if any, is an Errors listing every problem found, each with
// its file and, where known, line and field; it matches ErrInvalid.
func Load(path string) (*Policy, error) {
	return LoadWith(path, LoadOptions{})
}

// LoadOptions change how Load reads a policy; the zero value is Load's.
type LoadOptions struct {
	// MergeDomains lets several files define one domain, as
	// envoyproxy/ratelimit's MERGE_DOMAIN_CONFIG does: their top-level
	// descriptors join one tree (a key and value written in two files is
	// still a duplicate), and `replaces` may name a rule of another file.
	// Without it a domain defined twice is an error.
	MergeDomains bool
	// DescriptorAlgorithm is the algorithm of every descriptor limit that
	// names none; empty means gcra. envoyproxy/ratelimit counts fixed
	// windows, so where its users configure us (started as ratelimit, or
	// limits over xDS) it is fixed_window. An HTTP route's limits keep
	// gcra: that format is ours alone.
	DescriptorAlgorithm ratelimit.Algorithm
	// RejectAccountKeys, when set, makes every charged limit keyed by an
	// account (a header, form_field or json_field key) a problem with
	// this message: the server cannot key accounts safely (a shared
	// store without a key secret).
	RejectAccountKeys string
}

// LoadWith is Load with options.
func LoadWith(path string, opts LoadOptions) (*Policy, error) {
	files, probs := readPath(path)
	if len(probs) > 0 {
		return nil, probs
	}
	return loadFiles(files, opts)
}

// fileData is one file's name (as found, symlinks not resolved) and bytes.
type fileData struct {
	name string
	data []byte
}

func readPath(path string) ([]fileData, Errors) {
	info, err := os.Stat(path)
	if err != nil {
		return nil, Errors{ioProblem(path, err)}
	}
	names := []string{path}
	if info.IsDir() {
		if names, err = listDir(path); err != nil {
			return nil, Errors{ioProblem(path, err)}
		}
		if len(names) == 0 {
			return nil, Errors{{File: path, Message: "no *.yaml or *.yml files in this directory", Err: fs.ErrNotExist}}
		}
	}
	var files []fileData
	var probs Errors
	for _, name := range names {
		data, err := os.ReadFile(name)
		if err != nil {
			probs = append(probs, ioProblem(name, err))
			continue
		}
		files = append(files, fileData{name: name, data: data})
	}
	return files, probs
}

// listDir returns the policy files in dir, sorted. A symlink counts as what
// it points to; a dangling one is an error (so a half-swapped ConfigMap
// fails the load and the last good policy stays).
func listDir(dir string) ([]string, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, e := range entries {
		name := e.Name()
		ext := strings.ToLower(filepath.Ext(name))
		if strings.HasPrefix(name, ".") || (ext != ".yaml" && ext != ".yml") {
			continue
		}
		full := filepath.Join(dir, name)
		info, err := os.Stat(full)
		if err != nil {
			return nil, err
		}
		if info.Mode().IsRegular() {
			names = append(names, full)
		}
	}
	return names, nil
}

func ioProblem(name string, err error) *Problem {
	msg := err.Error()
	var pe *fs.PathError
	if errors.As(err, &pe) {
		msg = pe.Op + ": " + pe.Err.Error()
		if pe.Path != name {
			msg = pe.Path + ": " + msg
		}
	}
	return &Problem{File: name, Message: msg, Err: err}
}

// loadFiles parses and validates a set of files into one Policy.
func loadFiles(files []fileData, opts LoadOptions) (*Policy, error) {
	if !opts.DescriptorAlgorithm.Valid() {
		return nil, fmt.Errorf("%w: unknown default algorithm %q", ErrInvalid, opts.DescriptorAlgorithm)
	}
	var probs Errors
	p := &Policy{Domains: map[string]*Domain{}}
	builders := map[string]*domainBuilder{}
	sum := sha256.New()
	var httpFile string
	for _, f := range files {
		sum.Write([]byte(strconv.Quote(f.name)))
		sum.Write(f.data)
		p.Files = append(p.Files, f.name)
		pf := parseFile(f.name, f.data, &probs, opts.DescriptorAlgorithm.OrDefault())
		if dom := pf.domain; dom != nil {
			switch prev := p.Domains[dom.Name]; {
			case prev == nil:
				p.Domains[dom.Name], builders[dom.Name] = dom, pf.builder
			case opts.MergeDomains:
				probs = append(probs, prev.merge(dom)...)
				builders[dom.Name].absorb(pf.builder)
			default:
				probs = append(probs, &Problem{File: f.name, Line: pf.domainLine, Field: "domain",
					Message: "domain " + strconv.Quote(dom.Name) + " is already defined in " + prev.File +
						" (EXTAUTHZ_MERGE_DOMAINS=true merges the files of one domain)"})
			}
		}
		if pf.http != nil {
			if p.HTTP != nil {
				probs = append(probs, &Problem{File: f.name, Line: pf.httpLine, Field: "http",
					Message: "an http section is already defined in " + httpFile + "; only one file may have one"})
			} else {
				p.HTTP, httpFile = pf.http, f.name
			}
		}
	}
	for _, name := range sortedKeys(builders) {
		probs = append(probs, builders[name].check(name)...)
	}
	if opts.RejectAccountKeys != "" {
		probs = append(probs, accountKeyProblems(p.HTTP, httpFile, opts.RejectAccountKeys)...)
	}
	if err := probs.err(); err != nil {
		return nil, err
	}
	sort.Strings(p.Files)
	copy(p.digest[:], sum.Sum(nil))
	return p, nil
}

// parsedFile is what one file contributes.
type parsedFile struct {
	domain     *Domain
	builder    *domainBuilder // the domain's names and replaces, checked after merging
	domainLine int
	http       *HTTP
	httpLine   int
}

// parseFile reads one YAML document: a domain with its descriptors, an
// http section, or both.
func parseFile(name string, data []byte, probs *Errors, descAlg ratelimit.Algorithm) parsedFile {
	var pf parsedFile
	root, ok := parseYAML(name, data, probs)
	if !ok {
		return pf
	}
	d := newDecoder(name, probs)
	d.descAlg = descAlg
	var domain, descs, http, style field
	for _, kv := range d.fields(root, "") {
		switch kv.key {
		case "domain":
			domain = kv
		case "descriptors":
			descs = kv
		case "http":
			http = kv
		case "header_style":
			style = kv
		default:
			d.unknown(kv)
		}
	}
	if http.node != nil {
		pf.http, pf.httpLine = d.http(http), http.line
	}
	name = ""
	if domain.node != nil {
		name = d.str(domain)
	}
	switch {
	case name != "":
		pf.domain, pf.builder = d.domain(name, descs, descs.node != nil)
		pf.domainLine = domain.line
		if style.node != nil {
			pf.domain.HeaderStyle = d.headerStyle(style)
		}
	case domain.node != nil:
		d.problem(domain.line, "domain", "must not be empty")
	case descs.node != nil || http.node == nil:
		d.problem(1, "domain", "is required (a file holds a domain with its descriptors, an http section, or both)")
	}
	if style.node != nil && pf.domain == nil {
		d.problem(style.line, style.path, "is the header style of a domain's RLS answers; set http.header_style for routes")
	}
	return pf
}

// parseYAML returns the root node of a file's single YAML document; an
// empty file yields a nil root.
func parseYAML(name string, data []byte, probs *Errors) (*yaml.Node, bool) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	switch err := dec.Decode(&doc); {
	case errors.Is(err, io.EOF):
		return nil, true
	case err != nil:
		*probs = append(*probs, yamlProblem(name, err))
		return nil, false
	}
	// Further documents are an error unless empty (a trailing "---").
	for {
		var extra yaml.Node
		err := dec.Decode(&extra)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			*probs = append(*probs, yamlProblem(name, err))
			return nil, false
		}
		if len(extra.Content) > 0 && !isNull(extra.Content[0]) {
			*probs = append(*probs, &Problem{File: name, Line: extra.Line, Message: "more than one YAML document; put one per file"})
			return nil, false
		}
	}
	if len(doc.Content) == 0 {
		return nil, true
	}
	return doc.Content[0], true
}

// yamlProblem turns a yaml.v3 syntax error ("yaml: line 3: ...") into a
// Problem with the line split out.
func yamlProblem(name string, err error) *Problem {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	line := 0
	if rest, ok := strings.CutPrefix(msg, "line "); ok {
		if num, after, ok := strings.Cut(rest, ": "); ok {
			if n, err := strconv.Atoi(num); err == nil {
				line, msg = n, after
			}
		}
	}
	return &Problem{File: name, Line: line, Message: "bad YAML: " + msg, Err: err}
}

// Document is one policy document delivered by a source other than the
// file system (xDS): Name is what its problems are reported under.
type Document struct {
	Name string
	Data []byte
}

// LoadDocuments validates documents exactly as Load validates files (one
// domain per document, the same fields and checks), so that every policy
// source feeds the one validation. Problems carry no line: a document's
// lines were generated, not written, and the field path locates them. No
// documents is a valid policy without domains.
func LoadDocuments(docs []Document, opts LoadOptions) (*Policy, error) {
	files := make([]fileData, len(docs))
	for i, d := range docs {
		files[i] = fileData{name: d.Name, data: d.Data}
	}
	p, err := loadFiles(files, opts)
	var probs Errors
	if errors.As(err, &probs) {
		for _, pr := range probs {
			pr.Line = 0
		}
	}
	return p, err
}
