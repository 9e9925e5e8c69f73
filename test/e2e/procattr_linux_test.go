package e2e

import "syscall"

// procAttr makes the kernel kill a child when the test binary dies, so an
// aborted run leaves no Envoy or extauthz behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
