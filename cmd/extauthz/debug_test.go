package main

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestDebugAddrLoopbackOnly: EXTAUTHZ_DEBUG_ADDR accepts loopback
// addresses only, and Validate names the variable when it refuses one.
func TestDebugAddrLoopbackOnly(t *testing.T) {
	t.Parallel()
	for addr, ok := range map[string]bool{
		"":               true,
		"127.0.0.1:6060": true,
		"127.0.0.2:0":    true,
		"[::1]:6060":     true,
		"localhost:6060": true,
		":6060":          false,
		"0.0.0.0:6060":   false,
		"[::]:6060":      false,
		"10.0.0.1:6060":  false,
		"example.com:80": false,
		"127.0.0.1":      false, // no port
	} {
		err := checkDebugAddr(addr)
		if (err == nil) != ok {
			t.Errorf("checkDebugAddr(%q) = %v, want ok=%v", addr, err, ok)
		}
	}
	cfg := Config{GRPCAddr: ":1", HTTPAddr: ":2", ShutdownTimeout: 1, FailureMode: "open", DebugAddr: "0.0.0.0:6060"}
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "EXTAUTHZ_DEBUG_ADDR") {
		t.Fatalf("Validate with a non-loopback debug address: %v, want an error naming EXTAUTHZ_DEBUG_ADDR", err)
	}
}

// TestDebugServesPprof: the debug listener serves the pprof index and a
// heap profile, and nothing else.
func TestDebugServesPprof(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	stop, err := startDebug(addr, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + addr + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	if code, body := get("/debug/pprof/"); code != 200 || !strings.Contains(body, "goroutine") {
		t.Errorf("/debug/pprof/: %d %.80q, want the profile index", code, body)
	}
	if code, body := get("/debug/pprof/heap?debug=1"); code != 200 || !strings.Contains(body, "heap profile") {
		t.Errorf("heap profile: %d %.80q", code, body)
	}
	if code, _ := get("/metrics"); code != 404 {
		t.Errorf("/metrics on the debug listener: %d, want 404", code)
	}
}
