package agent

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"maps"
	"strings"
	"sync"
	"time"

	"kat.dws.rip/kat/runtime"
)

// fakeRuntime is an in-memory ContainerRuntime. Containers whose command
// mentions "exit 1" exit with code 1 as soon as they start.
type fakeRuntime struct {
	mu   sync.Mutex
	seq  int
	c    map[string]*runtime.ContainerStatus
	cmds map[string][]string
	// specs are the specs containers were created from, by name.
	specs    map[string]runtime.ContainerSpec
	creates  int
	starts   int
	execCode int
	events   chan runtime.Event
	now      func() time.Time
	// createErr, when set, fails every create.
	createErr error
	// down, when set, fails every create and listing: the runtime is
	// unreachable.
	down error
	// graces are the stop graces removals were given.
	graces []time.Duration
	// stops are the containers StopContainer stopped, in order.
	stops []string
	// orphaned are the containers removed while "stopping", which Podman
	// 4.3 removes without stopping them: their processes ran on.
	orphaned []string
	// leftovers, when set, makes every removal report that the runtime
	// left processes of the container, which it killed.
	leftovers bool
	// removeBlock, when set, holds every removal until it is closed; a
	// removal whose context ends meanwhile fails, as a killed podman rm
	// would.
	removeBlock chan struct{}
	// removing, when set, is told of every removal that waits for
	// removeBlock.
	removing chan struct{}
	// runBlock, when set, holds every run until it is closed; a run whose
	// context ends meanwhile fails, as a killed podman run would.
	runBlock chan struct{}
	// running is told of every run that waits for runBlock.
	running chan struct{}
	// lists counts listings, inspects inspections.
	lists, inspects int
	// listBlock, when set, holds every listing made after a create until
	// it is closed.
	listBlock chan struct{}
	// ignoreFilters makes listings return every container, as a runtime
	// that ignored the label filter would.
	ignoreFilters bool
	// listFilters and eventFilters are the label filters listings and
	// event streams were asked for, in order.
	listFilters, eventFilters []map[string]string
	// imageConfigs are the images' entrypoints and cmds by reference.
	imageConfigs map[string]runtime.ImageConfig
	// takenHostPorts are host ports something else holds: a container
	// publishing one fails to start, as Podman's port reservation does.
	takenHostPorts map[int]bool
}

func newFakeRuntime() *fakeRuntime {
	return &fakeRuntime{c: map[string]*runtime.ContainerStatus{}, cmds: map[string][]string{}, specs: map[string]runtime.ContainerSpec{},
		events: make(chan runtime.Event, 100), now: time.Now}
}

var _ Runtime = (*fakeRuntime)(nil)

func (f *fakeRuntime) ImageExists(context.Context, string) (bool, error) { return true, nil }
func (f *fakeRuntime) ImageConfig(_ context.Context, ref string) (runtime.ImageConfig, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.imageConfigs[ref]
	if !ok {
		return runtime.ImageConfig{}, fmt.Errorf("inspect image %s: %w", ref, runtime.ErrImageNotFound)
	}
	return c, nil
}

func (f *fakeRuntime) PullImage(context.Context, string, runtime.PullOptions) (string, error) {
	return "img", nil
}

func (f *fakeRuntime) CreateContainer(_ context.Context, spec runtime.ContainerSpec) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := cmp.Or(f.down, f.createErr); err != nil {
		return "", err
	}
	for _, c := range f.c {
		if c.Name == spec.Name {
			return "", fmt.Errorf("create %s: %w", spec.Name, runtime.ErrAlreadyExists)
		}
	}
	f.seq++
	f.creates++
	id := fmt.Sprintf("c%03d", f.seq)
	f.c[id] = &runtime.ContainerStatus{ID: id, Name: spec.Name, Image: spec.Image, Labels: maps.Clone(spec.Labels),
		State: runtime.StateCreated, CreatedAt: f.now(), Ports: spec.Ports}
	f.cmds[id] = append(append([]string{}, spec.Command...), spec.Args...)
	f.specs[spec.Name] = spec
	return id, nil
}

func (f *fakeRuntime) StartContainer(_ context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.c[id]
	if !ok {
		return runtime.ErrNotFound
	}
	if c.State == runtime.StateRunning {
		return nil
	}
	for _, p := range c.Ports {
		if f.takenHostPorts[p.HostPort] {
			return fmt.Errorf("podman start %s: cannot listen on the TCP port: listen tcp4 :%d: bind: address already in use: %w",
				id, p.HostPort, runtime.ErrHostPortInUse)
		}
	}
	f.starts++
	c.State, c.StartedAt = runtime.StateRunning, f.now()
	if strings.Contains(strings.Join(f.cmds[id], " "), "exit 1") {
		c.State, c.ExitCode, c.FinishedAt = runtime.StateExited, 1, c.StartedAt.Add(time.Millisecond)
	}
	return nil
}

// add makes a running container by hand, as podman run would, with labels
// as they are (no LabelManaged added), and returns its ID.
func (f *fakeRuntime) add(name string, labels map[string]string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.seq++
	id := fmt.Sprintf("c%03d", f.seq)
	f.c[id] = &runtime.ContainerStatus{ID: id, Name: name, Image: "localhost/kat-base:latest", Labels: maps.Clone(labels),
		State: runtime.StateRunning, CreatedAt: f.now(), StartedAt: f.now()}
	return id
}

// exit makes a running container exit with code, as podman kill would.
func (f *fakeRuntime) exit(id string, code int) {
	f.mu.Lock()
	c := f.c[id]
	c.State, c.ExitCode, c.FinishedAt = runtime.StateExited, code, f.now()
	f.mu.Unlock()
	f.events <- runtime.Event{ID: id, Action: runtime.ActionDied, ExitCode: code}
}

// RunContainer creates and starts, as podman run --detach does.
func (f *fakeRuntime) RunContainer(ctx context.Context, spec runtime.ContainerSpec) (string, error) {
	f.mu.Lock()
	block, running := f.runBlock, f.running
	f.mu.Unlock()
	if block != nil {
		running <- struct{}{}
		select {
		case <-block:
		case <-ctx.Done():
			return "", ctx.Err()
		}
	}
	id, err := f.CreateContainer(ctx, spec)
	if err != nil {
		return "", err
	}
	return id, f.StartContainer(ctx, id)
}

// StopContainer stops a container, as podman stop does, also one whose
// stop was cut short ("stopping").
func (f *fakeRuntime) StopContainer(_ context.Context, id string, _ time.Duration) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	c, ok := f.c[id]
	if !ok {
		return runtime.ErrNotFound
	}
	f.stops = append(f.stops, id)
	c.State, c.RawState, c.FinishedAt = runtime.StateExited, "exited", f.now()
	return nil
}

// stopping makes a running container's stop cut short, as a podman stop
// or rm killed half way leaves it.
func (f *fakeRuntime) stopping(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.c[id].State, f.c[id].RawState = runtime.StateExited, "stopping"
}

// StopAndRemoveContainer records the grace it was given and removes the
// container, as Podman 4.3 does: one "stopping" without stopping it (it is
// recorded as orphaned); an absent one is a success.
func (f *fakeRuntime) StopAndRemoveContainer(ctx context.Context, id string, grace time.Duration) error {
	f.mu.Lock()
	block, removing := f.removeBlock, f.removing
	f.mu.Unlock()
	if removing != nil {
		removing <- struct{}{}
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.graces = append(f.graces, grace)
	if c, ok := f.c[id]; ok && c.Stopping() {
		f.orphaned = append(f.orphaned, id)
	}
	delete(f.c, id)
	if f.leftovers {
		return fmt.Errorf("stop and remove container %s: %w", id, runtime.ErrKilledLeftovers)
	}
	return nil
}

func (f *fakeRuntime) InspectContainer(_ context.Context, id string) (*runtime.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.inspects++
	c, ok := f.c[id]
	if !ok {
		return nil, runtime.ErrNotFound
	}
	cp := *c
	cp.Labels = maps.Clone(c.Labels)
	return &cp, nil
}

func (f *fakeRuntime) ListManagedContainers(ctx context.Context, labels map[string]string) ([]runtime.ContainerStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if block := f.listBlock; block != nil && f.creates > 0 {
		f.mu.Unlock()
		select {
		case <-block:
		case <-ctx.Done():
		}
		f.mu.Lock()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
	}
	if f.down != nil {
		return nil, f.down
	}
	f.lists++
	f.listFilters = append(f.listFilters, maps.Clone(labels))
	var out []runtime.ContainerStatus
	for _, c := range f.c {
		match := c.Labels[runtime.LabelManaged] == "true"
		for k, v := range labels {
			match = match && c.Labels[k] == v
		}
		if match || f.ignoreFilters {
			cp := *c
			cp.Labels = maps.Clone(c.Labels)
			out = append(out, cp)
		}
	}
	return out, nil
}

func (f *fakeRuntime) Events(ctx context.Context, labels map[string]string, out chan<- runtime.Event) error {
	f.mu.Lock()
	f.eventFilters = append(f.eventFilters, maps.Clone(labels))
	f.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case e := <-f.events:
			select {
			case out <- e:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
}

func (f *fakeRuntime) Logs(_ context.Context, id string, _ runtime.LogOptions) (io.ReadCloser, error) {
	return io.NopCloser(strings.NewReader("log of " + id + "\n")), nil
}

func (f *fakeRuntime) Exec(_ context.Context, _ string, _ []string, _ time.Duration) (runtime.ExecResult, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return runtime.ExecResult{ExitCode: f.execCode}, nil
}

// running returns the IDs of running containers, by instance label.
func (f *fakeRuntime) byInstance() map[string]runtime.ContainerStatus {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]runtime.ContainerStatus{}
	for _, c := range f.c {
		out[c.Labels[runtime.LabelInstance]] = *c
	}
	return out
}

func (f *fakeRuntime) counts() (creates, starts int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.creates, f.starts
}
