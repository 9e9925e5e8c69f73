package tracing

import "testing"

func TestCheckEndpoint(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		endpoint, protocol string
		ok                 bool
	}{
		{"http://collector:4317", ProtocolGRPC, true},
		{"https://[::1]:4317", ProtocolGRPC, true},
		{"http://collector:4318/otlp", ProtocolHTTP, true},
		{"http://collector:4317/otlp", ProtocolGRPC, false}, // gRPC ignores paths: refuse one
		{"collector:4317", ProtocolGRPC, false},
		{"grpc://collector:4317", ProtocolGRPC, false},
		{"http://collector", ProtocolGRPC, false},
		{"http://:4317", ProtocolGRPC, false},
		{"http://u:p@collector:4317", ProtocolGRPC, false},
		{"http://collector:4318/?x=1", ProtocolHTTP, false},
	} {
		if err := CheckEndpoint(c.endpoint, c.protocol); (err == nil) != c.ok {
			t.Errorf("CheckEndpoint(%q, %s) = %v, want ok %v", c.endpoint, c.protocol, err, c.ok)
		}
	}
}
