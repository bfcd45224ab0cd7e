package agent

import (
	"context"
	"fmt"
	"sync"

	"kat.dws.rip/kat/runtime"
)

// images knows which images are on the node, each checked once, and pulls
// the missing ones, at most a fixed number at once. It is safe for
// concurrent use.
type images struct {
	rt    Runtime
	pulls chan struct{}
	mu    sync.Mutex
	known map[string]bool
}

func newImages(rt Runtime, maxPulls int) *images {
	return &images{rt: rt, pulls: make(chan struct{}, maxPulls), known: map[string]bool{}}
}

// ensure makes sure image ref is on the node: known, or found, or pulled
// (in a pull slot; another pull may have fetched it meanwhile).
func (im *images) ensure(ctx context.Context, ref string) error {
	im.mu.Lock()
	known := im.known[ref]
	im.mu.Unlock()
	if known {
		return nil
	}
	ok, err := im.rt.ImageExists(ctx, ref)
	if err != nil {
		return fmt.Errorf("check image %s: %w", ref, err)
	}
	if !ok {
		select {
		case im.pulls <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		ok, err = im.rt.ImageExists(ctx, ref) // another pull may have fetched it
		if err == nil && !ok {
			_, err = im.rt.PullImage(ctx, ref, runtime.PullOptions{})
		}
		<-im.pulls
		if err != nil {
			return fmt.Errorf("pull image %s: %w", ref, err)
		}
	}
	im.mu.Lock()
	im.known[ref] = true
	im.mu.Unlock()
	return nil
}

// forget makes the next ensure of ref check the node again: the image was
// removed behind the agent's back.
func (im *images) forget(ref string) {
	im.mu.Lock()
	defer im.mu.Unlock()
	delete(im.known, ref)
}
