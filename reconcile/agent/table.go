package agent

import (
	"maps"
	"reflect"
	"slices"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// assignedInstance is an instance assigned to the node: its assignment,
// its parsed spec and its restart rule.
type assignedInstance struct {
	a    api.Assignment
	q    *quadlet.Quadlet
	rule restartRule
}

// steppedContainer is what a step left an instance's container as: its
// status, or gone.
type steppedContainer struct {
	status *runtime.ContainerStatus // nil: removed
	// seq is the first listing that can show it.
	seq int64
}

// instanceTable is the agent's table of its instances, keyed by instance
// ID ("container:"+ID for a container without one): what is assigned, what
// containers exist, each instance's state, the step, health check or verify
// command under way, what steps left containers as, and the host ports
// reserved for containers being created. Its methods are the only way to
// change it, and each keeps these invariants:
//
//   - An instance has at most one step under way, and at most one health
//     check and one verify command: next starts them, and only endStep,
//     endProbe and endVerify end them.
//   - What a step left a container as holds until a listing started after
//     the step ended: an older listing never undoes a step, so no step is
//     repeated on a stale listing, and no step waits for one.
//   - A host port is reserved for one instance at a time, never one a
//     listed container publishes; a reservation lasts until a listing shows
//     the container, its create fails, or the instance is unassigned.
//   - An instance whose ports are published at their own number (a
//     DaemonService's) is not created while a container leaving the node
//     still publishes one of them: stop-first on the node.
//   - An instance's state is kept while it is assigned, has a container or
//     has a step under way (restart counts and back-off survive a listing
//     that misses the container), and dropped after.
//   - The reports compared to find a change are the ones last handed out.
//
// It is safe for concurrent use.
type instanceTable struct {
	mu         sync.Mutex
	assigned   map[string]assignedInstance
	containers map[string]runtime.ContainerStatus
	state      map[string]instanceState
	// busy holds the step under way of each instance that has one.
	busy map[string]stepKind
	// probing and verifying hold the instances whose health check or
	// verify command runs.
	probing   map[string]bool
	verifying map[string]bool
	// listSeq numbers container listings as they start; stepped holds
	// what steps did since, with the number of the first listing that can
	// show it.
	listSeq int64
	stepped map[string]steppedContainer
	// reserved are host ports picked for creates under way, with their
	// instance.
	reserved map[int]string
	// lastReports are the reports reportsIfChanged last handed out.
	lastReports []api.InstanceStatus
	// secretVersions gives the versions of the secrets an instance holds
	// (secretStore.versionsOf); nil: none.
	secretVersions func(id string) map[string]int64
	// proxyLoaded says whether the node's ingress proxy started at the
	// given time has its routes loaded (ingressUpdater.loaded); nil: the
	// node runs no proxy.
	proxyLoaded func(startedAt time.Time) bool
}

func newInstanceTable() *instanceTable {
	return &instanceTable{
		assigned: map[string]assignedInstance{}, containers: map[string]runtime.ContainerStatus{},
		state: map[string]instanceState{}, busy: map[string]stepKind{},
		probing: map[string]bool{}, verifying: map[string]bool{},
		stepped: map[string]steppedContainer{}, reserved: map[int]string{},
	}
}

// containerKey is the table's key of a container: its instance, or
// "container:"+id without one.
func containerKey(labels map[string]string, id string) string {
	if k := labels[runtime.LabelInstance]; k != "" {
		return k
	}
	return "container:" + id
}

// seed sets the state of instances the agent knew before it started (the
// status this node reported last), before anything else is known.
func (t *instanceTable) seed(states map[string]instanceState) {
	t.mu.Lock()
	defer t.mu.Unlock()
	maps.Copy(t.state, states)
}

// assign makes as the assigned instances. An instance assigned before keeps
// its entry (an assignment never changes); add makes the entry of a new one,
// or leaves it out (an invalid spec) by returning false.
func (t *instanceTable) assign(as []api.Assignment, add func(api.Assignment) (assignedInstance, bool)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	next := make(map[string]assignedInstance, len(as))
	for _, a := range as {
		if old, ok := t.assigned[a.InstanceID]; ok {
			next[a.InstanceID] = old
			continue
		}
		if ai, ok := add(a); ok {
			next[a.InstanceID] = ai
		}
	}
	t.assigned = next
}

// startListing numbers a listing of the containers about to start.
func (t *instanceTable) startListing() int64 {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.listSeq++
	return t.listSeq
}

// applyListing makes cs, the containers listing seq found, the node's
// containers, keeping what steps did since the listing started; it ends
// the reservations of host ports the listing shows, or that no assigned
// instance needs any more.
func (t *instanceTable) applyListing(seq int64, cs []runtime.ContainerStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.containers = make(map[string]runtime.ContainerStatus, len(cs))
	for _, c := range cs {
		k := containerKey(c.Labels, c.ID)
		if old, dup := t.containers[k]; dup && old.State == runtime.StateRunning {
			continue
		}
		t.containers[k] = c
	}
	for id, sc := range t.stepped {
		switch {
		case sc.seq <= seq:
			delete(t.stepped, id) // the listing shows the step
		case sc.status == nil:
			delete(t.containers, id)
		default:
			t.containers[id] = *sc.status
		}
	}
	for p, owner := range t.reserved {
		_, listed := t.containers[owner]
		_, assigned := t.assigned[owner]
		if listed || !assigned {
			delete(t.reserved, p) // the listing now shows the port, or nobody needs it
		}
	}
}

// taskKind is what a task of next does.
type taskKind int

const (
	taskStep   taskKind = iota // a step of decideInstance
	taskProbe                  // a health check
	taskVerify                 // the verify command
)

// task is work next started for one instance: what the agent runs for it,
// with what the table knew when it started it.
type task struct {
	kind taskKind
	id   string
	step stepKind
	ai   assignedInstance
	// c is the instance's container; nil when it has none (a create).
	c  *runtime.ContainerStatus
	hc *quadlet.HealthCheck
	v  *quadlet.VerifyCommand
}

// next decides, at now, the next step of every instance without one under
// way (decideInstance), and which health checks and verify commands are
// due; it marks them under way and returns them for the agent to run. This
// is the one place a step is chosen. It then drops the state of instances
// that are gone.
func (t *instanceTable) next(now time.Time) []task {
	t.mu.Lock()
	defer t.mu.Unlock()
	keys := slices.Sorted(maps.Keys(t.assigned))
	for k := range t.containers {
		if _, ok := t.assigned[k]; !ok {
			keys = append(keys, k)
		}
	}
	var out []task
	for _, id := range keys {
		if _, busy := t.busy[id]; busy {
			continue
		}
		ai, isAssigned := t.assigned[id]
		var c *runtime.ContainerStatus
		if cs, ok := t.containers[id]; ok {
			c = &cs
		}
		step, st := decideInstance(isAssigned, ai.rule, c, t.state[id], now)
		t.state[id] = st
		if step == stepCreate && t.heldByLeaving(id, fixedHostPorts(ai.q)) {
			// Stop-first: the removal's end wakes the next pass.
			continue
		}
		switch step {
		case stepCreate, stepStart, stepRemove:
			t.busy[id] = step
			out = append(out, task{kind: taskStep, id: id, step: step, ai: ai, c: c})
		case stepNone:
			if !isAssigned || c == nil {
				continue
			}
			// A paused container is checked too: it serves nothing, and its
			// check fails.
			if (c.State == runtime.StateRunning || c.State == runtime.StatePaused) && !t.probing[id] {
				hc := healthCheckOf(ai.q)
				due, h := probeDue(st.Health, hc, c.ID, c.StartedAt, now)
				st.Health = h
				t.state[id] = st
				if due {
					t.probing[id] = true
					out = append(out, task{kind: taskProbe, id: id, ai: ai, c: c, hc: hc})
				}
			}
			if v := verifyOf(ai.q); !t.verifying[id] &&
				verifyDue(v, st.Verify, t.report(ai, c, st, true).Ready()) {
				t.verifying[id] = true
				out = append(out, task{kind: taskVerify, id: id, ai: ai, c: c, v: v})
			}
		}
	}
	for id := range t.state {
		_, a := t.assigned[id]
		_, c := t.containers[id]
		if _, busy := t.busy[id]; !a && !c && !busy {
			delete(t.state, id)
		}
	}
	return out
}

// recordStepped records what a step made of an instance's container before it
// ended (a run, before the inspect that follows it), until a listing
// started after it says otherwise.
func (t *instanceTable) recordStepped(id string, c *runtime.ContainerStatus) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.stepped[id] = steppedContainer{status: c, seq: t.listSeq + 1}
	t.containers[id] = *c
}

// endStep ends the step under way of instance id: its state takes what
// afterStep makes of e, and when known, after is what the step left the
// container as (nil: removed), which holds until a listing started after
// now says otherwise. It returns the new state and afterStep's verdict
// and wait.
func (t *instanceTable) endStep(id string, rule restartRule, e stepEnd, after *runtime.ContainerStatus, known bool, now time.Time) (instanceState, stepVerdict, time.Duration) {
	t.mu.Lock()
	defer t.mu.Unlock()
	st, v, wait := afterStep(t.state[id], rule, e, now)
	t.state[id] = st
	if known {
		t.stepped[id] = steppedContainer{status: after, seq: t.listSeq + 1}
		if after == nil {
			delete(t.containers, id)
		} else {
			t.containers[id] = *after
		}
	}
	delete(t.busy, id)
	return st, v, wait
}

// endProbe ends the health check under way of instance id. Its result ok
// counts only when counts is true (the check ran to its end) and the
// instance still has the container checked (containerID): a restart or a
// new container starts over. It reports whether the instance became
// healthy, with its assignment.
func (t *instanceTable) endProbe(id, containerID string, hc *quadlet.HealthCheck, ok, counts bool, now time.Time) (bool, api.Assignment) {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.probing, id)
	st, exists := t.state[id]
	if !exists || st.Health.container != containerID || !counts {
		return false, api.Assignment{}
	}
	was := st.Health.Status
	st.Health = probeResult(st.Health, hc, ok, now)
	t.state[id] = st
	return st.Health.Status == api.HealthHealthy && was != api.HealthHealthy, t.assigned[id].a
}

// endVerify ends the verify command under way of instance id, recording
// its verdict v when counts is true (it ran to its end) and the instance
// is still known. It reports whether it recorded it.
func (t *instanceTable) endVerify(id string, v verifyState, counts bool) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	delete(t.verifying, id)
	st, exists := t.state[id]
	if !exists || !counts {
		return false
	}
	st.Verify = v
	t.state[id] = st
	return true
}

// container returns the container of instance id.
// withSecretVolumes returns the assigned instances that have a container
// and mount a secret volume.
func (t *instanceTable) withSecretVolumes() []assignedInstance {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []assignedInstance
	for id, ai := range t.assigned {
		if _, ok := t.containers[id]; !ok || ai.q == nil {
			continue
		}
		if _, vols := ai.q.Workload.Spec.SecretRefs(); len(vols) > 0 {
			out = append(out, ai)
		}
	}
	return out
}

func (t *instanceTable) container(id string) (runtime.ContainerStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.containers[id]
	return c, ok
}

// leftovers counts the containers the agent still has to stop and remove:
// those of instances no longer assigned, and removals under way.
func (t *instanceTable) leftovers() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for k := range t.containers {
		if _, ok := t.assigned[k]; !ok {
			n++
		}
	}
	for k, s := range t.busy {
		if _, listed := t.containers[k]; s == stepRemove && !listed {
			n++
		}
	}
	return n
}

// running returns the running containers of assigned instances, by
// instance ID.
func (t *instanceTable) running() []runtime.ContainerStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []runtime.ContainerStatus
	for _, id := range slices.Sorted(maps.Keys(t.assigned)) {
		if c, ok := t.containers[id]; ok && c.State == runtime.StateRunning {
			out = append(out, c)
		}
	}
	return out
}

// removing reports whether the step under way for key is a removal.
func (t *instanceTable) removing(key string) bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.busy[key] == stepRemove
}

// reports returns the report of every assigned instance, by instance ID.
func (t *instanceTable) reports() []api.InstanceStatus {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.reportsLocked()
}

// report renders one instance (instanceReport); a running ingress proxy
// whose routes are not loaded yet is not healthy yet. Callers hold t.mu.
func (t *instanceTable) report(ai assignedInstance, c *runtime.ContainerStatus, st instanceState, hasVerify bool) api.InstanceStatus {
	r := instanceReport(ai.a, c, st, healthCheckOf(ai.q) != nil, hasVerify)
	if t.proxyLoaded != nil && r.Phase == api.InstanceRunning && r.HealthStatus != api.HealthUnhealthy &&
		isIngressProxy(ai.q) && !t.proxyLoaded(c.StartedAt) {
		r.HealthStatus = api.HealthPending
	}
	return r
}

func (t *instanceTable) reportsLocked() []api.InstanceStatus {
	out := make([]api.InstanceStatus, 0, len(t.assigned))
	for _, id := range slices.Sorted(maps.Keys(t.assigned)) {
		ai := t.assigned[id]
		var c *runtime.ContainerStatus
		if cs, ok := t.containers[id]; ok {
			c = &cs
		}
		r := t.report(ai, c, t.state[id], verifyOf(ai.q) != nil)
		if c != nil && t.secretVersions != nil {
			r.SecretVersions = t.secretVersions(id)
		}
		out = append(out, r)
	}
	return out
}

// reportsIfChanged returns the reports and whether they differ from the
// ones it returned last.
func (t *instanceTable) reportsIfChanged() ([]api.InstanceStatus, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	reps := t.reportsLocked()
	changed := !reflect.DeepEqual(reps, t.lastReports)
	t.lastReports = reps
	return reps, changed
}

// retryFailedNow makes every instance waiting to retry a failed step due at
// now, and returns how many there were; its failure count stays, so one
// that fails again waits longer.
func (t *instanceTable) retryFailedNow(now time.Time) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := 0
	for id, st := range t.state {
		if st.Retry.failures > 0 && !st.Retry.due(now) {
			st.Retry.At = now
			t.state[id] = st
			n++
		}
	}
	return n
}
