package agent

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"strconv"
	"time"

	"kat.dws.rip/kat/reconcile/agent/containerspec"
	"kat.dws.rip/kat/runtime"
)

// create pulls the image when it is missing (an assignment with a build
// reference was built before), then runs the container: created and
// started in one step.
func (ag *Agent) create(ctx context.Context, ai assignedInstance) (string, runtime.ContainerSpec, error) {
	a := ai.a
	if a.Build == nil {
		if err := ag.images.ensure(ctx, a.Image); err != nil {
			return "", runtime.ContainerSpec{}, err
		}
	}
	id, spec, err := ag.runContainer(ctx, ai)
	if errors.Is(err, runtime.ErrImageNotFound) {
		// Removed behind the agent's back: check it again next time.
		ag.images.forget(a.Image)
	}
	return id, spec, err
}

// runContainer creates and starts the container of an instance whose image
// is on the node: the spec BuildSpec makes, with the host ports the table
// reserves, the agent's labels, its network and its stop grace.
func (ag *Agent) runContainer(ctx context.Context, ai assignedInstance) (string, runtime.ContainerSpec, error) {
	a := ai.a
	// The ports stay reserved until a listing shows the container.
	now := ag.cfg.Now()
	free := func(port int) bool { return !ag.clashes.avoid(port, now) && runtime.HostPortFree(port) }
	hostPorts := ag.table.reserveHostPorts(a.InstanceID, loadBalancerPorts(ai.q), fixedHostPorts(ai.q) != nil, free, ag.cfg.HostPorts)
	created := false
	defer func() {
		if !created {
			ag.table.releaseHostPorts(a.InstanceID)
		}
	}()
	if err := ag.secrets.materialize(ctx, a, ai.q); err != nil {
		return "", runtime.ContainerSpec{}, fmt.Errorf("secrets: %w", err)
	}
	in := SpecInputs{HostPorts: hostPorts}
	if containerspec.NeedsImageConfig(ai.q) {
		img := a.Image
		if img == "" {
			img = ai.q.Workload.Spec.Source.Image
		}
		cfg, err := ag.cfg.Runtime.ImageConfig(ctx, img)
		if err != nil {
			return "", runtime.ContainerSpec{}, fmt.Errorf("secret environment variables: %w", err)
		}
		in.Image = &cfg
	}
	spec, err := ag.cfg.BuildSpec(a, ai.q, in)
	if err != nil {
		return "", spec, fmt.Errorf("build container spec: %w", err)
	}
	if spec.Labels == nil {
		spec.Labels = map[string]string{}
	}
	maps.Copy(spec.Labels, map[string]string{
		runtime.LabelManaged: "true", runtime.LabelNamespace: a.Namespace, runtime.LabelWorkload: a.Workload,
		runtime.LabelInstance: a.InstanceID, runtime.LabelSpecHash: a.SpecHash,
		runtime.LabelGeneration: strconv.FormatInt(a.Generation, 10), runtime.LabelNode: ag.cfg.Node,
		runtime.LabelCluster: ag.cfg.ClusterUID,
	})
	if a.SourceCommit != "" {
		spec.Labels[runtime.LabelSourceCommit] = a.SourceCommit
	}
	if isIngressProxy(ai.q) {
		if err := ag.prepareIngressProxy(ai.q, &spec); err != nil {
			return "", spec, err
		}
	}
	if err := ag.joinNetwork(&spec, a); err != nil {
		return "", spec, err
	}
	spec.LogMaxSize = ag.cfg.LogMaxSize
	grace := ag.stopGrace(ai, nil)
	spec.StopTimeout = grace
	spec.Labels[runtime.LabelStopGrace] = strconv.Itoa(int(grace / time.Second))
	id, err := ag.cfg.Runtime.RunContainer(ctx, spec)
	if errors.Is(err, runtime.ErrAlreadyExists) {
		return "", spec, fmt.Errorf("run container: %w (a container this agent does not manage may hold the name %s: "+
			"another cluster's, or one from before containers carried %s; remove it by hand if nothing needs it)",
			err, spec.Name, runtime.LabelCluster)
	}
	if err != nil {
		if id != "" && ag.dropPortClash(ctx, ai, id, spec.Ports, err) {
			return "", spec, fmt.Errorf("run container: %w (removed: the next try picks other host ports)", err)
		}
		return "", spec, fmt.Errorf("run container: %w", err)
	}
	created = true
	return id, spec, nil
}

// dropPortClash removes the container id of an instance that could not
// start because a host port it publishes (ports) is taken (cause is the
// start's error), when the agent picked those ports: started again, it
// would clash again for as long as the port stays taken, whereas a new
// container picks its ports anew, around the taken ones (avoided for
// clashMemory). It reports whether the container is gone. A container with
// fixed ports is kept: only those ports will do.
func (ag *Agent) dropPortClash(ctx context.Context, ai assignedInstance, id string, ports []runtime.PortMapping, cause error) bool {
	if !errors.Is(cause, runtime.ErrHostPortInUse) || fixedHostPorts(ai.q) != nil {
		return false
	}
	ag.clashes.taken(ports, ag.cfg.Now())
	if err := ag.cfg.Runtime.StopAndRemoveContainer(ctx, id, 0); err != nil {
		ag.cfg.Logger.Warn().Err(err).Str("instance", ai.a.InstanceID).Str("container", id).
			Msg("remove a container whose host port is taken")
		return false
	}
	return true
}
