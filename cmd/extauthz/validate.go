package main

import (
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/extauthz/extauthz/pkg/policy"
)

// validateMain loads the policy at path as the server would and prints every
// problem (each names its file, line and field) to stderr, or a short summary
// to stdout when there is none.
func validateMain(path string, stdout, stderr io.Writer) int {
	p, err := policy.Load(path)
	if err != nil {
		var probs policy.Errors
		if errors.As(err, &probs) {
			for _, pr := range probs {
				fmt.Fprintln(stderr, pr.Error())
			}
			fmt.Fprintf(stderr, "%s: %d problem(s)\n", path, len(probs))
		} else {
			fmt.Fprintf(stderr, "%s: %v\n", path, err)
		}
		return 1
	}
	fmt.Fprintln(stdout, summary(p))
	return 0
}

// summary describes a loaded policy in one line.
func summary(p *policy.Policy) string {
	domains := make([]string, 0, len(p.Domains))
	for name := range p.Domains {
		domains = append(domains, name)
	}
	sort.Strings(domains)
	routes := 0
	if p.HTTP != nil {
		routes = len(p.HTTP.Routes)
	}
	return fmt.Sprintf("ok: %d file(s), %d domain(s) [%s], %d http route(s)",
		len(p.Files), len(domains), strings.Join(domains, ", "), routes)
}
