package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

// markdownFiles are the documents whose links are checked.
func markdownFiles(t *testing.T) []string {
	t.Helper()
	files, err := filepath.Glob("../../docs/*.md")
	if err != nil {
		t.Fatal(err)
	}
	return append([]string{"../../README.md"}, files...)
}

// prose returns the lines of a Markdown file outside fenced code blocks.
func prose(text string) []string {
	var out []string
	fenced := false
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			out = append(out, line)
		}
	}
	return out
}

// githubSlug is the anchor GitHub gives a heading: lower case, punctuation
// other than '-' and '_' dropped, spaces to '-'.
func githubSlug(heading string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(heading)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the heading slugs of a Markdown file, with GitHub's -1,
// -2 suffixes for repeats.
func anchors(text string) map[string]bool {
	out := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(text) {
		if !strings.HasPrefix(line, "#") {
			continue
		}
		h := strings.TrimLeft(line, "#")
		if !strings.HasPrefix(h, " ") {
			continue
		}
		s := githubSlug(strings.ReplaceAll(h, "`", ""))
		if n := seen[s]; n > 0 {
			out[fmt.Sprintf("%s-%d", s, n)] = true
		} else {
			out[s] = true
		}
		seen[s]++
	}
	return out
}

var mdLink = regexp.MustCompile(`\]\(([^()\s]+)\)`)

// TestDocLinksResolve: every relative link in README.md and docs/*.md names
// a file that exists, and every #anchor a heading of the file it points to.
func TestDocLinksResolve(t *testing.T) {
	t.Parallel()
	checked := 0
	for _, file := range markdownFiles(t) {
		text, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for _, line := range prose(string(text)) {
			for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
					continue
				}
				checked++
				if problem := checkLink(file, target); problem != "" {
					t.Errorf("%s: link %s: %s", strings.TrimPrefix(file, "../../"), target, problem)
				}
			}
		}
	}
	if checked < 20 {
		t.Errorf("checked %d links; the parser has lost them", checked)
	}
}

// checkLink returns what is wrong with a relative link from file, or "".
func checkLink(file, target string) string {
	path, anchor, _ := strings.Cut(target, "#")
	dest := file
	if path != "" {
		dest = filepath.Join(filepath.Dir(file), path)
		if _, err := os.Stat(dest); err != nil {
			return "no such file"
		}
	}
	if anchor == "" {
		return ""
	}
	text, err := os.ReadFile(dest)
	if err != nil {
		return err.Error()
	}
	if !anchors(string(text))[anchor] {
		return fmt.Sprintf("no heading with anchor #%s in %s", anchor, filepath.Base(dest))
	}
	return ""
}

func TestGitHubSlug(t *testing.T) {
	t.Parallel()
	for h, want := range map[string]string{
		"Testing (test/e2e)":                     "testing-teste2e",
		"Who the caller is (the identity chain)": "who-the-caller-is-the-identity-chain",
		"Large bodies in object storage":         "large-bodies-in-object-storage",
		"`idempotency-replay-unavailable`":       "idempotency-replay-unavailable",
	} {
		if got := githubSlug(strings.ReplaceAll(h, "`", "")); got != want {
			t.Errorf("githubSlug(%q) = %q, want %q", h, got, want)
		}
	}
}
