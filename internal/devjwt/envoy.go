package devjwt

import (
	"bytes"
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// ErrNoProvider means the configuration has no jwt_authn provider with a
// remote_jwks to replace.
var ErrNoProvider = errors.New("devjwt: no jwt_authn provider with remote_jwks")

// UseLocalJWKS returns an Envoy YAML configuration with every jwt_authn
// provider's remote_jwks replaced by local_jwks reading path, everything
// else (issuer, audiences, rules, anchors, comments) as it was: the shipped
// envoy/front-proxy.yaml made to accept this package's tokens, for a local
// try. It fails with ErrNoProvider when nothing was replaced.
func UseLocalJWKS(config []byte, path string) ([]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(config, &doc); err != nil {
		return nil, fmt.Errorf("devjwt: %w", err)
	}
	n := replaceRemoteJWKS(&doc, path, false)
	if n == 0 {
		return nil, ErrNoProvider
	}
	var out bytes.Buffer
	enc := yaml.NewEncoder(&out)
	enc.SetIndent(2)
	if err := enc.Encode(&doc); err != nil {
		return nil, fmt.Errorf("devjwt: %w", err)
	}
	return out.Bytes(), nil
}

// replaceRemoteJWKS walks node; under a `providers` mapping (inProviders)
// each provider's remote_jwks key becomes local_jwks: {filename: path}. It
// returns how many it replaced.
func replaceRemoteJWKS(node *yaml.Node, path string, inProviders bool) int {
	n := 0
	switch node.Kind {
	case yaml.DocumentNode, yaml.SequenceNode:
		for _, c := range node.Content {
			n += replaceRemoteJWKS(c, path, false)
		}
	case yaml.MappingNode:
		for i := 0; i+1 < len(node.Content); i += 2 {
			k, v := node.Content[i], node.Content[i+1]
			if inProviders && v.Kind == yaml.MappingNode {
				n += replaceInProvider(v, path)
				continue
			}
			n += replaceRemoteJWKS(v, path, k.Value == "providers")
		}
	}
	return n
}

func replaceInProvider(provider *yaml.Node, path string) int {
	for i := 0; i+1 < len(provider.Content); i += 2 {
		if provider.Content[i].Value != "remote_jwks" {
			continue
		}
		provider.Content[i].Value = "local_jwks"
		provider.Content[i].HeadComment = "The local key set of cmd/devjwt (never in a deployment)."
		provider.Content[i+1] = &yaml.Node{Kind: yaml.MappingNode, Style: yaml.FlowStyle, Content: []*yaml.Node{
			{Kind: yaml.ScalarNode, Value: "filename"}, {Kind: yaml.ScalarNode, Value: path},
		}}
		return 1
	}
	return 0
}
