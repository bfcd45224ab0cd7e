package agent

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// Builder is the part of *build.Builder the agent uses: a node builds the
// image of an assignment that carries a build reference instead of pulling
// it.
type Builder interface {
	Build(ctx context.Context, req build.Request) (api.Build, error)
	Prune(ctx context.Context, namespace, workload string) ([]string, error)
	Release(namespace, workload, commit string)
	Log(namespace, workload, commit string) (io.ReadCloser, error)
}

var _ Builder = (*build.Builder)(nil)

// buildStepTimeout bounds a create step that builds its image: the
// Builder's own timeout (default 10 minutes) plus the create itself.
const buildStepTimeout = 15 * time.Minute

// buildRequest is the build an assignment asks for. It is pure.
func buildRequest(a api.Assignment, q *quadlet.Quadlet, auth api.GitAuth) build.Request {
	req := build.Request{
		Namespace: a.Namespace, Workload: a.Workload, Repository: a.Build.Repository, Commit: a.Build.Commit,
		CacheImage: q.Workload.Spec.Source.CacheImage, Auth: auth, UserNSSlot: a.UserNSSlot,
	}
	if q.Build != nil {
		req.Spec = q.Build.Spec
	}
	// The ref the leader resolved the commit from: its head is the
	// cheapest fetch of the commit while the ref has not moved on.
	if g := q.Workload.Spec.Source.Git; g != nil && g.Commit == "" {
		switch {
		case g.Tag != "":
			req.Ref = "refs/tags/" + g.Tag
		case g.Branch != "":
			req.Ref = "refs/heads/" + g.Branch
		}
	}
	return req
}

// buildImage builds the image of a; the Builder records the build under
// /kat/builds, and a failure is also an event. A failure that retrying
// cannot fix wraps runtime.ErrInvalidSpec, which fails the instance: the old
// instances keep running.
func (ag *Agent) buildImage(ctx context.Context, ai assignedInstance) error {
	a := ai.a
	if ag.cfg.Builder == nil {
		return fmt.Errorf("%w: instance %s must be built from %s, but this node has no builder", runtime.ErrInvalidSpec, a.InstanceID, a.Build.Repository)
	}
	hop(ag.cfg.Logger, "build-start", a)
	rec, err := ag.cfg.Builder.Build(ctx, buildRequest(a, ai.q, ag.cfg.BuildAuth))
	hop(ag.cfg.Logger, "build-end", a)
	if err == nil {
		if !rec.Existing {
			ag.cfg.Logger.Info().Str("instance", a.InstanceID).Str("image", rec.Image).Bool("cache_hit", rec.CacheHit).Msg("image built")
			how := "built"
			if rec.CacheHit {
				how = "pulled from the build cache"
			}
			ev := api.WorkloadRef(a.Namespace, a.Workload, "").Eventf(api.EventNormal, api.ReasonBuildSucceeded,
				"image %s at %s %s on node %s", rec.Image, api.ShortCommit(a.Build.Commit), how, ag.cfg.Node)
			if eerr := ag.cfg.Facts.AppendEvent(ctx, ev); eerr != nil {
				ag.cfg.Logger.Warn().Err(eerr).Msg("cannot record the build success event")
			}
		}
		return nil
	}
	if ctx.Err() != nil {
		return err
	}
	var fe *build.FailedError
	if !errors.As(err, &fe) {
		return fmt.Errorf("build %s: %w", rec.Image, err)
	}
	// The build record (the Builder stored it) is the fact the leader
	// derives the workload's BuildFailed condition from; the event tells
	// the story.
	ev := api.WorkloadRef(a.Namespace, a.Workload, "").Eventf(api.EventWarning, api.ReasonBuildFailed,
		"build at %s failed on node %s (%s): %v", api.ShortCommit(a.Build.Commit), ag.cfg.Node, fe.Stage, fe.Err)
	if eerr := ag.cfg.Facts.AppendEvent(ctx, ev); eerr != nil {
		ag.cfg.Logger.Warn().Err(eerr).Msg("cannot record the build failure event")
	}
	if fe.Stalled() {
		return fmt.Errorf("%w: %w", runtime.ErrInvalidSpec, err)
	}
	return err
}

// pruneAfter runs the Builder's housekeeping for the workload of a removed
// container that ran a built image: a rollout finished.
func (ag *Agent) pruneAfter(ctx context.Context, c *runtime.ContainerStatus) {
	if ag.cfg.Builder == nil || c == nil || !strings.Contains(c.Image, api.LocalImageRepository+"/") {
		return
	}
	ns, wl := c.Labels[runtime.LabelNamespace], c.Labels[runtime.LabelWorkload]
	removed, err := ag.cfg.Builder.Prune(ctx, ns, wl)
	if err != nil {
		ag.cfg.Logger.Warn().Err(err).Str("workload", ns+"/"+wl).Msg("image housekeeping failed")
		return
	}
	if len(removed) > 0 {
		ag.cfg.Logger.Info().Strs("images", removed).Str("workload", ns+"/"+wl).Msg("removed old images")
	}
}

// ErrNoBuilder is returned by BuildLog on a node that cannot build.
var ErrNoBuilder = errors.New("agent: this node has no builder")

// BuildLog writes the log of the build of commit (full or its first 12
// digits) of workload ns/name on this node to w.
func (ag *Agent) BuildLog(ns, name, commit string, w io.Writer) error {
	if ag.cfg.Builder == nil {
		return ErrNoBuilder
	}
	rc, err := ag.cfg.Builder.Log(ns, name, commit)
	if err != nil {
		return err
	}
	defer rc.Close()
	if _, err := io.Copy(w, rc); err != nil {
		return fmt.Errorf("copy build log: %w", err)
	}
	return nil
}
