package s3test

import "syscall"

// procAttr makes the kernel kill moto_server when the test binary dies, so
// an aborted test run leaves no servers behind.
func procAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
