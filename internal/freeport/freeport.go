// Package freeport picks TCP ports for servers that tests and their
// harnesses start, and may start again on the same ports. It links no
// package testing, so the programs that set up test clusters (scripts/e2e)
// use it as the tests do.
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
)

// TCP returns n TCP ports free on every address of the machine at the time
// of the call. They are below Linux's ephemeral range (32768-60999): a port
// of that range, once released, can become the local port of any outgoing
// connection on the machine before the server binds it again.
func TCP(n int) ([]int, error) {
	var ports []int
	var lns []net.Listener
	defer func() {
		for _, ln := range lns {
			_ = ln.Close()
		}
	}()
	for tries := 0; len(ports) < n; tries++ {
		if tries == 1000 {
			return nil, fmt.Errorf("free ports: no %d free TCP ports in 20000-29999 after %d tries", n, tries)
		}
		ln, err := net.Listen("tcp", ":"+strconv.Itoa(20000+rand.IntN(10000)))
		if err != nil {
			continue // taken
		}
		lns = append(lns, ln)
		ports = append(ports, ln.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}
