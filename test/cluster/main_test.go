package cluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"
)

// node is the cluster of this test run, started once by TestMain; nil when
// it could not start (setupErr says why).
var (
	node     *cluster
	setupErr error
)

// errMissing marks a missing prerequisite (not root, a binary not built, no
// Docker engine): the tests skip outside CI and fail under CI=true.
var errMissing = errors.New("missing")

func TestMain(m *testing.M) { os.Exit(run(m)) }

func run(m *testing.M) int {
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	node, setupErr = startCluster(ctx)
	cancel()
	status := 0
	if node != nil {
		defer func() {
			if err := node.stop(); err != nil {
				fmt.Fprintln(os.Stderr, "cluster: teardown did not leave the host as found:", err)
				status = 1
			}
		}()
	}
	switch {
	case setupErr == nil:
		fmt.Fprintf(os.Stderr, "cluster: node Ready %s after the start\n", time.Since(start).Round(time.Second))
	case errors.Is(setupErr, errMissing) && !ci():
		fmt.Fprintln(os.Stderr, "cluster: the tests skip:", setupErr)
	default:
		// In CI a missing piece is a failure, never a silent skip; a piece
		// that is here but does not start is a failure everywhere.
		fmt.Fprintln(os.Stderr, "cluster: the cluster did not start:", setupErr)
		if node != nil {
			node.dumpLogs()
		}
		return 1
	}
	status = m.Run()
	if status != 0 && node != nil {
		node.dumpLogs()
	}
	return status
}

func ci() bool { return os.Getenv("CI") == "true" }

// needCluster returns the run's cluster, or skips the test naming what is
// missing (TestMain already failed the run under CI=true).
func needCluster(t *testing.T) *cluster {
	t.Helper()
	if node == nil {
		t.Skip("no cluster:", setupErr)
	}
	return node
}
