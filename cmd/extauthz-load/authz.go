package main

import (
	"context"
	"fmt"
	"strconv"

	authv3 "github.com/envoyproxy/go-control-plane/envoy/service/auth/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
)

// API names for -api.
const (
	apiRLS   = "rls"
	apiAuthz = "authz"
)

// authzCaller calls ext_authz Check with an HTTP request whose tenant header
// (-key, e.g. x-tenant-id) takes one of -keys values, as Envoy's ext_authz
// filter sends it: a GET of -path on host bench. A denied request with 429
// counts as over the limit.
func authzCaller(conn grpc.ClientConnInterface, cfg config) caller {
	c := authv3.NewAuthorizationClient(conn)
	reqs := make([]*authv3.CheckRequest, cfg.keys)
	for k := range reqs {
		reqs[k] = &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: strconv.Itoa(k), Method: "GET", Host: "bench", Path: cfg.path, Protocol: "HTTP/1.1",
				Headers: map[string]string{cfg.keyName: "k" + strconv.Itoa(k)},
			}},
		}}
	}
	return func(ctx context.Context, i int) (outcome, error) {
		resp, err := c.Check(ctx, reqs[i%len(reqs)])
		if err != nil {
			return outcomeOther, err
		}
		switch code := codes.Code(resp.GetStatus().GetCode()); {
		case code == codes.OK:
			return outcomeOK, nil
		case resp.GetDeniedResponse().GetStatus().GetCode() == 429:
			return outcomeOver, nil
		default:
			return outcomeOther, fmt.Errorf("denied: status %s, HTTP %d", code, resp.GetDeniedResponse().GetStatus().GetCode())
		}
	}
}
