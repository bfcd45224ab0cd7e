package agent

import (
	"cmp"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/runtime"
)

// Instances returns the report of every assigned instance, by instance ID.
func (ag *Agent) Instances() []api.InstanceStatus { return ag.table.reports() }

// Leftovers counts the containers the agent still has to stop and remove,
// of instances no longer assigned (DepartConfig.Leftovers).
func (ag *Agent) Leftovers() int { return ag.table.leftovers() }

// Running returns the running containers of the instances assigned to the
// node, as the last listing showed them (UsageSampler.Sample samples them).
func (ag *Agent) Running() []runtime.ContainerStatus { return ag.table.running() }

// notifyIfChanged tells OnChange (the heartbeat) and the kat_instances
// gauge when the reports changed since they were last told.
func (ag *Agent) notifyIfChanged() {
	if reps, changed := ag.table.reportsIfChanged(); changed {
		metrics.SetInstances(ag.cfg.Node, instancesByPhase(reps))
		ag.cfg.OnChange()
	}
}

// instancesByPhase counts reps by phase, with every phase present.
func instancesByPhase(reps []api.InstanceStatus) map[string]int {
	n := map[string]int{api.InstancePending: 0, api.InstanceRunning: 0,
		api.InstanceSucceeded: 0, api.InstanceFailed: 0}
	for _, r := range reps {
		n[r.Phase]++
	}
	return n
}

// instanceReport renders one instance for the heartbeat. It is pure.
func instanceReport(a api.Assignment, c *runtime.ContainerStatus, st instanceState, hasHealthCheck, hasVerify bool) api.InstanceStatus {
	r := api.InstanceStatus{
		WorkloadName: a.Workload, Namespace: a.Namespace, InstanceID: a.InstanceID, Generation: a.Generation,
		SpecHash: a.SpecHash, Image: a.Image, Restarts: st.Restarts, RestartWindowStart: st.WindowStart,
		WindowRestarts: st.WindowRestarts, Phase: api.InstancePending, HealthStatus: api.HealthNotApplicable,
		Message: st.Message,
	}
	if hasHealthCheck {
		r.HealthStatus = api.HealthPending
	}
	if c != nil {
		r.ContainerID, r.ImageID, r.State, r.ExitCode, r.StartedAt = c.ID, c.ImageID, string(c.State), c.ExitCode, c.StartedAt
		for _, p := range c.Ports {
			r.Ports = append(r.Ports, api.PublishedPort{HostIP: p.HostIP, HostPort: p.HostPort, ContainerPort: p.ContainerPort, Protocol: p.Protocol})
		}
	}
	switch {
	case st.Failed:
		r.Phase = api.InstanceFailed
	case st.Succeeded:
		r.Phase = api.InstanceSucceeded
	case c != nil && (c.State == runtime.StateRunning || c.State == runtime.StatePaused):
		r.Phase = api.InstanceRunning
		if hasHealthCheck && st.Health.Status != "" {
			r.HealthStatus = st.Health.Status
		}
	}
	r.NodeRetry = st.NodeRetry && r.Phase == api.InstancePending
	if r.Phase != api.InstanceRunning && hasHealthCheck {
		r.HealthStatus = api.HealthPending
	}
	if hasVerify {
		r.Verification, r.VerifyMessage = cmp.Or(st.Verify.Status, api.VerifyPending), st.Verify.Message
	}
	return r
}
