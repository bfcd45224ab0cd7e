package harness

import (
	"errors"
	"fmt"
	"os"
	goruntime "runtime"

	"golang.org/x/sys/unix"
)

// InNetns runs f on a thread inside the host's network namespace: sockets
// f opens (a dial, a DNS exchange) belong to the host's network, as if a
// process of the host made them, at the cost of no process per call. f
// must not start goroutines that open sockets: they run on other threads,
// in the machine's namespace. The thread goes back to the machine's
// namespace afterwards; if that fails it is not reused.
func (h Host) InNetns(f func() error) error {
	target, err := os.Open(h.NetnsPath())
	if err != nil {
		return fmt.Errorf("enter %s's network namespace: %w", h.Name, err)
	}
	defer target.Close()
	goruntime.LockOSThread()
	orig, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
	if err != nil {
		goruntime.UnlockOSThread()
		return fmt.Errorf("enter %s's network namespace: remember the machine's: %w", h.Name, err)
	}
	defer orig.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		goruntime.UnlockOSThread()
		return fmt.Errorf("enter %s's network namespace: %w", h.Name, err)
	}
	ferr := f()
	if err := unix.Setns(int(orig.Fd()), unix.CLONE_NEWNET); err != nil {
		// The thread stays locked and dies with this goroutine.
		return errors.Join(ferr, fmt.Errorf("leave %s's network namespace: %w", h.Name, err))
	}
	goruntime.UnlockOSThread()
	return ferr
}
