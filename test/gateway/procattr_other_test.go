//go:build !linux

package gateway

import "syscall"

// procAttr has no parent-death signal outside Linux; cleanups stop children.
func procAttr() *syscall.SysProcAttr { return nil }
