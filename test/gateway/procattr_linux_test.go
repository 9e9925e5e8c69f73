package gateway

import "syscall"

// procAttr makes the kernel kill a child when the test binary dies, so an
// aborted run leaves no controller or extauthz behind (func-e gives the
// Envoy it starts the same signal when the controller dies).
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
