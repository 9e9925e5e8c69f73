// Command pause is the pod sandbox's process in test/cluster: it holds the
// pod's namespaces and does nothing until a signal ends it (the role of
// registry.k8s.io/pause, which no registry serves here). Built static and
// packed into an OCI archive by the test harness.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGINT, syscall.SIGTERM)
	<-sig
}
