package testenv

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"os/exec"
	"testing"
)

// HAProxyBinary returns the path of haproxy, or skips tb (fails it when
// RequirePrereqsEnv is set) when it is not installed.
func HAProxyBinary(tb testing.TB) string {
	tb.Helper()
	bin, err := exec.LookPath("haproxy")
	if err != nil {
		SkipOrFail(tb, "haproxy is not installed (apt-get install haproxy)")
	}
	return bin
}

// FreePort returns a TCP port free on 127.0.0.1 at the time of the call,
// for a server the test starts.
func FreePort(tb testing.TB) int {
	tb.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatalf("find a free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// LoopbackBinds returns an HAProxy configuration whose "bind :PORT" lines
// for ports (0 is skipped) bind 127.0.0.1 only: a test's proxy is not
// reachable from the network.
func LoopbackBinds(cfg []byte, ports ...int) []byte {
	for _, p := range ports {
		if p != 0 {
			cfg = bytes.Replace(cfg, fmt.Appendf(nil, "bind :%d", p), fmt.Appendf(nil, "bind 127.0.0.1:%d", p), 1)
		}
	}
	return cfg
}

// StartHAProxy starts bin (HAProxyBinary) in master-worker mode in the
// foreground with the configuration file cfgFile and its master socket at
// masterSock, as the ingress proxy's container command runs it. stop ends
// it and waits for it; a test that does not restart it calls stop in a
// cleanup.
func StartHAProxy(tb testing.TB, bin, cfgFile, masterSock string) (stop func()) {
	tb.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	cmd := exec.CommandContext(ctx, bin, "-W", "-db", "-S", masterSock, "-f", cfgFile)
	cmd.Stdout, cmd.Stderr = io.Discard, io.Discard
	if err := cmd.Start(); err != nil {
		cancel()
		tb.Fatalf("start haproxy: %v", err)
	}
	return func() {
		cancel()
		_ = cmd.Wait()
	}
}
