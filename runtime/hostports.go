package runtime

import (
	"fmt"
	"math/rand/v2"
	"net"
	"strconv"
	"strings"
)

// PortRange is an inclusive range of host ports.
type PortRange struct {
	First, Last int
}

// DefaultHostPorts is where an agent publishes a container port on the host
// when the port itself is taken (by another replica on the node, or by
// another program). It lies below Linux's default ephemeral range
// (32768-60999, net.ipv4.ip_local_port_range): a port published there is
// redirected (DNAT) to the container for every connection to the host,
// including from the host's own programs, so it must not be one the kernel
// hands out to them. It is Kubernetes' NodePort range, which operators
// already keep clear.
var DefaultHostPorts = PortRange{First: 30000, Last: 32767}

// String renders the range as "FIRST-LAST".
func (r PortRange) String() string { return fmt.Sprintf("%d-%d", r.First, r.Last) }

// Validate reports whether the range is usable.
func (r PortRange) Validate() error {
	if r.First < 1 || r.Last > 65535 || r.First > r.Last {
		return fmt.Errorf("port range %s: want FIRST-LAST with 1 <= FIRST <= LAST <= 65535", r)
	}
	return nil
}

// ParsePortRange parses "FIRST-LAST".
func ParsePortRange(s string) (PortRange, error) {
	var r PortRange
	first, last, ok := strings.Cut(s, "-")
	if !ok {
		return r, fmt.Errorf("port range %q: want FIRST-LAST, e.g. %s", s, DefaultHostPorts)
	}
	var err error
	if r.First, err = strconv.Atoi(first); err != nil {
		return r, fmt.Errorf("port range %q: first port: %w", s, err)
	}
	if r.Last, err = strconv.Atoi(last); err != nil {
		return r, fmt.Errorf("port range %q: last port: %w", s, err)
	}
	return r, r.Validate()
}

// Pick returns a port of the range that taken does not claim and that no
// program on the host listens on now, starting at a random point so that
// agents sharing a host seldom race for the same one; 0 when there is none.
// taken may be nil.
func (r PortRange) Pick(taken func(port int) bool) int {
	n := r.Last - r.First + 1
	if n <= 0 {
		return 0
	}
	start := rand.IntN(n)
	for i := range n {
		p := r.First + (start+i)%n
		if taken != nil && taken(p) {
			continue
		}
		if HostPortFree(p) {
			return p
		}
	}
	return 0
}

// HostPortFree reports whether a TCP listener can bind port on every
// address of the host now. Podman's conmon holds the host ports of running
// containers, so a published port is not free.
func HostPortFree(port int) bool {
	l, err := net.Listen("tcp", ":"+strconv.Itoa(port))
	if err != nil {
		return false
	}
	_ = l.Close()
	return true
}

// Set parses s into r; with String and Type, *PortRange is a command-line
// flag value (pflag.Value).
func (r *PortRange) Set(s string) error {
	v, err := ParsePortRange(s)
	if err != nil {
		return err
	}
	*r = v
	return nil
}

// Type names the flag value's form.
func (r *PortRange) Type() string { return "FIRST-LAST" }
