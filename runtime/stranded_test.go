package runtime

import (
	"errors"
	"net"
	"os"
	"syscall"
	"testing"
	"time"
)

// TestResetStranded: the connections queued on a listening socket of the
// given port, which its holder never accepts, are reset, and the holder
// keeps the socket; a socket of another port keeps its queue.
func TestResetStranded(t *testing.T) {
	t.Parallel()
	listen := func() net.Listener {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { l.Close() })
		return l
	}
	dial := func(l net.Listener) net.Conn {
		c, err := net.Dial("tcp", l.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	held, other := listen(), listen()
	stranded := []net.Conn{dial(held), dial(held)}
	dial(other)
	n, err := resetStranded(os.Getpid(), []int{held.Addr().(*net.TCPAddr).Port})
	if err != nil || n != 2 {
		t.Fatalf("resetStranded: %d, %v; want the 2 connections queued on the held port", n, err)
	}
	for i, c := range stranded {
		// A bound, so that a connection left waiting fails the test
		// instead of hanging it.
		if err := c.SetReadDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Read(make([]byte, 1)); !errors.Is(err, syscall.ECONNRESET) {
			t.Errorf("stranded connection %d: read %v, want a reset", i, err)
		}
	}
	// The other port's connection still waits for its listener, and the
	// held socket still listens.
	for _, l := range []net.Listener{other, held} {
		if l == held {
			dial(held)
		}
		c, err := l.Accept()
		if err != nil {
			t.Fatalf("accept on %s: %v", l.Addr(), err)
		}
		c.Close()
	}
	if n, err := resetStranded(1<<22+1, []int{80}); err != nil || n != 0 {
		t.Errorf("a process that is gone: %d, %v; want none and no error", n, err)
	}
}
