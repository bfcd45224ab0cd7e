package agent

import (
	"context"
	"errors"
	"fmt"
	"io"

	"kat.dws.rip/kat/runtime"
)

// ErrUnknownInstance is returned by Logs for an instance this node does not
// run.
var ErrUnknownInstance = errors.New("agent: no such instance on this node")

// Logs streams the output of an instance's container into w until it ends
// (follow) or all of it is written.
func (ag *Agent) Logs(ctx context.Context, instanceID string, follow bool, w io.Writer) error {
	c, ok := ag.table.container(instanceID)
	if !ok {
		return fmt.Errorf("%w: %s", ErrUnknownInstance, instanceID)
	}
	rc, err := ag.cfg.Runtime.Logs(ctx, c.ID, runtime.LogOptions{Follow: follow})
	if err != nil {
		return fmt.Errorf("logs of %s: %w", instanceID, err)
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("stream logs of %s: %w", instanceID, err)
	}
	return nil
}
