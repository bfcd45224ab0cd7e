//go:build !linux

package dnsserver

import "syscall"

// freebind does nothing where IP_FREEBIND does not exist: the address must
// be the host's before the server starts.
func freebind(_, _ string, _ syscall.RawConn) error { return nil }
