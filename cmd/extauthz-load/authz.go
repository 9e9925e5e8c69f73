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

// authzCaller calls ext_authz Check over grpc-go with the requests of
// buildCheckRequests.
func authzCaller(conn grpc.ClientConnInterface, cfg config) caller {
	c := authv3.NewAuthorizationClient(conn)
	reqs := buildCheckRequests(cfg)
	return func(ctx context.Context, i int) (outcome, error) {
		resp, err := c.Check(ctx, reqs[i%len(reqs)])
		if err != nil {
			return outcomeOther, err
		}
		return authzOutcome(codes.Code(resp.GetStatus().GetCode()), int32(resp.GetDeniedResponse().GetStatus().GetCode()))
	}
}

// buildCheckRequests prepares one Check request per key: an HTTP request
// whose tenant header (-key, e.g. x-tenant-id) takes one of -keys values, as
// Envoy's ext_authz filter sends it: a GET of -path on host bench.
func buildCheckRequests(cfg config) []*authv3.CheckRequest {
	reqs := make([]*authv3.CheckRequest, cfg.keys)
	for k := range reqs {
		reqs[k] = &authv3.CheckRequest{Attributes: &authv3.AttributeContext{
			Request: &authv3.AttributeContext_Request{Http: &authv3.AttributeContext_HttpRequest{
				Id: strconv.Itoa(k), Method: "GET", Host: "bench", Path: cfg.path, Protocol: "HTTP/1.1",
				Headers: map[string]string{cfg.keyName: "k" + strconv.Itoa(k)},
			}},
		}}
	}
	return reqs
}

// authzOutcome classifies a Check response by its status code and its
// denied response's HTTP status: a denial with 429 counts as over the limit.
func authzOutcome(code codes.Code, deniedHTTP int32) (outcome, error) {
	switch {
	case code == codes.OK:
		return outcomeOK, nil
	case deniedHTTP == 429:
		return outcomeOver, nil
	}
	return outcomeOther, fmt.Errorf("denied: status %s, HTTP %d", code, deniedHTTP)
}
