//go:build !linux

package s3test

import "syscall"

// procAttr has no parent-death signal outside Linux; cleanup stops servers.
func procAttr() *syscall.SysProcAttr { return nil }
