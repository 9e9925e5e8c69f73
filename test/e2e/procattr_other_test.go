//go:build !linux

package e2e

import "syscall"

// procAttr has no parent-death signal outside Linux; cleanups stop children.
func procAttr() *syscall.SysProcAttr { return nil }
