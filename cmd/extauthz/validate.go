package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"

	"github.com/extauthz/extauthz/pkg/policy"
)

// validateMain loads the policy at path as the server would (honouring
// EXTAUTHZ_MERGE_DOMAINS) and prints every problem (each names its file,
// line and field) to stderr, or a short summary to stdout when there is none.
func validateMain(path string, stdout, stderr io.Writer) int {
	var opts policy.LoadOptions
	if v := os.Getenv("EXTAUTHZ_MERGE_DOMAINS"); v != "" {
		merge, err := strconv.ParseBool(v)
		if err != nil {
			fmt.Fprintf(stderr, "EXTAUTHZ_MERGE_DOMAINS: want true or false, got %q\n", v)
			return 2
		}
		opts.MergeDomains = merge
	}
	p, err := policy.LoadWith(path, opts)
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
