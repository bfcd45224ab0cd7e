package dnsserver

import (
	"syscall"

	"golang.org/x/sys/unix"
)

// freebind sets IP_FREEBIND on a socket before it binds, so the server can
// listen on the node's overlay address before the overlay interface has it.
func freebind(_, _ string, c syscall.RawConn) error {
	var serr error
	if err := c.Control(func(fd uintptr) {
		serr = unix.SetsockoptInt(int(fd), unix.SOL_IP, unix.IP_FREEBIND, 1) //nolint:gosec // a file descriptor fits an int
	}); err != nil {
		return err
	}
	return serr
}
