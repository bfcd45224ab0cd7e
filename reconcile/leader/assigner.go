package leader

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// AssignerConfig holds the dependencies of RunAssigner.
type AssignerConfig struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// Node is the leader's node name: until the scheduler exists every
	// instance is placed on it. Required.
	Node string
	// Resync is the period of a full pass without any watch event. Default
	// 5s.
	Resync time.Duration
	// Now and NewSuffix replace time.Now and RandomSuffix, for tests.
	Now       func() time.Time
	NewSuffix func() string
	Logger    zerolog.Logger
}

// RunAssigner is the leader's assignment and workload-status loop. On every
// change of desired state or of a node's reported status, and every Resync,
// it plans assignments with PlanAssignments, writes the plan, then derives
// every workload's status with DeriveWorkloadStatus and writes those that
// changed. It returns when ctx ends.
func RunAssigner(ctx context.Context, cfg AssignerConfig) error {
	if cfg.Repo == nil || cfg.Node == "" {
		return errors.New("assigner: repo and node are required")
	}
	if cfg.Resync <= 0 {
		cfg.Resync = 5 * time.Second
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.NewSuffix == nil {
		cfg.NewSuffix = RandomSuffix
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait() // the watch channels close once ctx is cancelled
	defer cancel()
	wake := make(chan struct{}, 1)
	st := cfg.Repo.Store()
	for _, prefix := range []string{resources.DesiredRootPrefix(), resources.NodeStatusKey(""), resources.AssignmentsPrefix(), resources.AppSourcesPrefix()} {
		ch, err := st.Watch(ctx, prefix, 0)
		if err != nil {
			return fmt.Errorf("assigner: watch %s: %w", prefix, err)
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			reconcile.Forward(ch, wake)
		}()
	}
	t := time.NewTicker(cfg.Resync)
	defer t.Stop()
	for {
		if err := assignOnce(ctx, cfg); err != nil && ctx.Err() == nil {
			cfg.Logger.Warn().Err(err).Msg("assignment pass failed")
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-wake:
		}
	}
}

func assignOnce(ctx context.Context, cfg AssignerConfig) error {
	desired, err := cfg.Repo.ListDesiredSpecs(ctx)
	if err != nil {
		return err
	}
	current, err := cfg.Repo.ListAssignments(ctx, "")
	if err != nil {
		return err
	}
	nodes, err := cfg.Repo.ListNodeStatuses(ctx)
	if err != nil {
		return err
	}
	reported := map[string]resources.InstanceStatus{}
	for _, n := range nodes {
		for _, is := range n.WorkloadInstances {
			reported[is.InstanceID] = is
		}
	}
	apps, err := cfg.Repo.ListAppSources(ctx)
	if err != nil {
		return err
	}
	commits := make(map[string]string, len(apps))
	for k, a := range apps {
		commits[k] = a.Commit
	}
	now := cfg.Now().UTC()
	plan := PlanAssignments(AssignInput{
		Node: cfg.Node, Desired: desired, Current: current, Reported: reported, Commits: commits, Now: now, NewSuffix: cfg.NewSuffix,
	})
	if !plan.Empty() {
		if err := cfg.Repo.WriteAssignments(ctx, plan.Put, plan.Delete); err != nil {
			return err
		}
		cfg.Logger.Info().Int("added", len(plan.Put)).Int("removed", len(plan.Delete)).Msg("assignments written")
		if current, err = cfg.Repo.ListAssignments(ctx, ""); err != nil {
			return err
		}
	}
	return writeStatuses(ctx, cfg, desired, current, reported, commits, now)
}

func writeStatuses(ctx context.Context, cfg AssignerConfig, desired []resources.DesiredSpec, current []resources.Assignment,
	reported map[string]resources.InstanceStatus, commits map[string]string, now time.Time,
) error {
	byWorkload := map[string][]resources.Assignment{}
	for _, a := range current {
		k := a.Namespace + "/" + a.Workload
		byWorkload[k] = append(byWorkload[k], a)
	}
	workloads, err := cfg.Repo.ListWorkloads(ctx, "")
	if err != nil {
		return err
	}
	files := map[string]map[string][]byte{}
	for _, d := range desired {
		files[d.Meta.Namespace+"/"+d.Meta.Name] = d.Files
	}
	var errs []error
	for _, w := range workloads {
		k := w.Meta.Namespace + "/" + w.Meta.Name
		q, err := quadlet.ParseWorkload(files[k], quadlet.ParseOptions{DefaultNamespace: w.Meta.Namespace})
		if err != nil {
			continue
		}
		commit := ""
		if q.Workload.Spec.Source.Git != nil {
			commit = commits[k]
		}
		in := StatusInput{
			Meta: w.Meta, TemplateHash: InstanceTemplate(q, commit), SourceCommit: commit, Desired: resources.DesiredInstances(q),
			Assigned: byWorkload[k], Reported: reported, Prev: w.Status,
		}
		if statusEqual(DeriveWorkloadStatus(in, now), w.Status) {
			continue
		}
		// Derive again from the stored status inside a compare-and-swap, so
		// a condition another writer set meanwhile is kept, not lost.
		err = cfg.Repo.UpdateWorkloadStatus(ctx, w.Meta.Namespace, w.Meta.Name, func(prev resources.WorkloadStatus) (resources.WorkloadStatus, bool) {
			in.Prev = prev
			st := DeriveWorkloadStatus(in, now)
			return st, !statusEqual(st, prev)
		})
		if err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
