//go:build !linux

package redistest

import "syscall"

// procAttr has no parent-death signal outside Linux; cleanup stops servers.
func procAttr() *syscall.SysProcAttr { return nil }
