package runtime

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// CreateContainer implements ContainerRuntime: POST /containers/create.
func (p *Podman) CreateContainer(ctx context.Context, spec ContainerSpec) (string, error) {
	return p.createOrRun(ctx, spec, false)
}

// RunContainer implements ContainerRuntime: the create and the start, two
// calls to the service (no podman process).
func (p *Podman) RunContainer(ctx context.Context, spec ContainerSpec) (string, error) {
	return p.createOrRun(ctx, spec, true)
}

// createOrRun creates the container of spec, and starts it when start is
// set, and returns its ID. As with podman run, a container that was created
// but could not start is left as it is (created): its ID comes with the
// error, which says why.
func (p *Podman) createOrRun(ctx context.Context, spec ContainerSpec, start bool) (string, error) {
	verb := "create"
	if start {
		verb = "run"
	}
	if err := spec.Validate(); err != nil {
		return "", fmt.Errorf("%s container %q: %w", verb, spec.Name, err)
	}
	// Explicit maps (spec.IDMap) skip the queue: only auto allocation
	// deadlocks.
	if userns := p.userNS(&spec); spec.IDMap == nil && (userns == "auto" || strings.HasPrefix(userns, "auto:")) {
		release, err := p.autoCreate.acquire(ctx)
		if err != nil {
			return "", fmt.Errorf("%s container %s with --userns=auto: %w", verb, spec.Name, err)
		}
		defer release()
	}
	var created struct {
		ID string `json:"Id"`
	}
	if err := p.callJSON(ctx, request{op: "podman create", method: http.MethodPost, path: "/containers/create", body: p.createSpec(&spec)}, &created); err != nil {
		return "", fmt.Errorf("%s container %s: %w", verb, spec.Name, err)
	}
	if created.ID == "" {
		return "", fmt.Errorf("%s container %s: podman create: the service named no container ID", verb, spec.Name)
	}
	if start {
		if err := p.start(ctx, created.ID, len(spec.Ports) > 0); err != nil {
			return created.ID, fmt.Errorf("%s container %s: %w", verb, spec.Name, err)
		}
	}
	return created.ID, nil
}

// StartContainer implements ContainerRuntime: POST /containers/{id}/start.
func (p *Podman) StartContainer(ctx context.Context, id string) error {
	if err := checkID(id); err != nil {
		return err
	}
	if err := p.start(ctx, id, true); err != nil {
		return fmt.Errorf("start container %s: %w", id, err)
	}
	return nil
}

// start starts a container; one that runs already answers 304, a success.
// When the container may publish ports (published: false only for a spec
// that publishes none), it then resets the connections stranded in its port
// reservations (resetStrandedAfterStart, one inspect) and tells OnNotice.
func (p *Podman) start(ctx context.Context, id string, published bool) error {
	if err := p.callJSON(ctx, request{op: "podman start " + id, method: http.MethodPost, path: pathOf("/containers/%s/start", id)}, nil); err != nil {
		return err
	}
	if published {
		n, err := p.resetStrandedAfterStart(ctx, id)
		p.notice(Notice{Container: id, What: NoticeStrandedReset, Count: n, Err: err})
	}
	return nil
}

// StopContainer implements ContainerRuntime: `podman stop`, a process in a
// group of its own (as every removal), so that a stop under way runs to its
// end when the agent is stopped; through the service it would end with it.
// The grace period is rounded up to whole seconds; ctx should outlast it.
func (p *Podman) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	if _, err := p.run(ctx, "stop", "--time", strconv.Itoa(ceilSeconds(max(grace, 0))), "--", id); err != nil {
		return fmt.Errorf("stop container %s: %w", id, err)
	}
	return nil
}

// RemoveContainer implements ContainerRuntime. With force a running
// container is killed at once (stop it first for a graceful end). As
// StopAndRemoveContainer, it makes sure no process of the container is left.
func (p *Podman) RemoveContainer(ctx context.Context, id string, force bool) error {
	if err := checkID(id); err != nil {
		return err
	}
	args := []string{"rm"}
	if force {
		args = append(args, "--force", "--time", "0")
	}
	err := p.remove(ctx, "remove container", id, args)
	if force && errors.Is(err, ErrNotFound) {
		return nil
	}
	return err
}

// StopAndRemoveContainer implements ContainerRuntime: `podman rm --force
// --time GRACE`, which sends the stop signal, kills after grace and removes,
// in one process; then it makes sure no process of the container is left,
// and deletes the tracked flows of its addresses (forgetFlows), telling
// OnNotice.
func (p *Podman) StopAndRemoveContainer(ctx context.Context, id string, grace time.Duration) error {
	if err := checkID(id); err != nil {
		return err
	}
	// Its addresses, for forgetFlows once it is gone.
	var addrs []netip.Addr
	if e, err := p.inspectEntry(ctx, id); err == nil {
		addrs = e.addrs()
		id = e.ID
	}
	err := p.remove(ctx, "stop and remove container", id, []string{"rm", "--force", "--time", strconv.Itoa(ceilSeconds(max(grace, 0)))})
	if errors.Is(err, ErrNotFound) {
		return nil
	}
	if err == nil || errors.Is(err, ErrKilledLeftovers) {
		n, ferr := forgetFlows(addrs)
		p.notice(Notice{Container: id, What: NoticeFlowsForgotten, Count: n, Err: ferr})
	}
	return err
}

// remove runs podman rm with args and then makes sure that no process of
// the container is left once podman no longer has it. Podman 4.3 removes a
// container whose stop was cut short (podman shows it "stopping": the
// podman stop or rm was killed half way) without stopping it, even with
// --force: it runs the stop only for a container "running", and deletes
// from runc only one "stopped" or "created". The processes then run on,
// unseen by podman and KAT, holding the container's ports. remove kills
// what is left, waits until it is gone and returns an error wrapping
// ErrKilledLeftovers.
func (p *Podman) remove(ctx context.Context, what, id string, args []string) error {
	full := id
	if !isFullID(id) { // the processes are found by the full ID
		st, err := p.InspectContainer(ctx, id)
		if err != nil {
			return fmt.Errorf("%s %s: %w", what, id, err)
		}
		full = st.ID
	}
	_, err := p.run(ctx, append(args, "--", full)...)
	if err != nil && !errors.Is(err, ErrNotFound) && ctx.Err() == nil {
		// podman 4.3 sometimes fails to unmount a container's shm while
		// its cleanup process races it, yet removes the container: what
		// counts is whether it is gone.
		if exists, xerr := p.containerExists(ctx, full); xerr == nil && !exists {
			err = nil
		}
	}
	if err != nil && !errors.Is(err, ErrNotFound) {
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	// Podman has no such container (any more): its processes must be gone
	// too.
	killed, kerr := killLeftovers(ctx, procRoot, full)
	switch {
	case kerr != nil:
		return fmt.Errorf("%s %s: podman has no such container, but its processes run on: %w", what, id, kerr)
	case len(killed) > 0:
		return fmt.Errorf("%s %s: %w: killed processes %v", what, id, ErrKilledLeftovers, killed)
	case err != nil:
		return fmt.Errorf("%s %s: %w", what, id, err)
	}
	return nil
}

// procRoot is where the driver looks for a container's processes.
const procRoot = "/proc"

// isFullID reports whether id is a whole podman container ID: 64 lowercase
// hexadecimal digits.
func isFullID(id string) bool {
	if len(id) != 64 {
		return false
	}
	for _, c := range id {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return false
		}
	}
	return true
}

// containerExists asks GET /containers/{id}/exists.
func (p *Podman) containerExists(ctx context.Context, id string) (bool, error) {
	err := p.callJSON(ctx, request{op: "podman container exists " + id, method: http.MethodGet, path: pathOf("/containers/%s/exists", id)}, nil)
	switch {
	case err == nil:
		return true, nil
	case isStatus(err, http.StatusNotFound):
		return false, nil
	}
	return false, fmt.Errorf("check container %s: %w", id, err)
}

// InspectContainer implements ContainerRuntime: GET /containers/{id}/json.
func (p *Podman) InspectContainer(ctx context.Context, id string) (*ContainerStatus, error) {
	if err := checkID(id); err != nil {
		return nil, err
	}
	e, err := p.inspectEntry(ctx, id)
	if err != nil {
		return nil, err
	}
	return e.status(), nil
}

// inspectEntry is the service's inspect of container id.
func (p *Podman) inspectEntry(ctx context.Context, id string) (*inspectEntry, error) {
	resp, err := p.call(ctx, request{op: "podman container inspect " + id, method: http.MethodGet, path: pathOf("/containers/%s/json", id)})
	if err != nil {
		return nil, fmt.Errorf("inspect container %s: %w", id, err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err == nil {
		var e *inspectEntry
		if e, err = decodeInspect(out); err == nil {
			return e, nil
		}
	}
	return nil, fmt.Errorf("inspect container %s: %w", id, err)
}

// ListManagedContainers implements ContainerRuntime: GET /containers/json
// with label filters.
func (p *Podman) ListManagedContainers(ctx context.Context, labels map[string]string) ([]ContainerStatus, error) {
	q := url.Values{"all": {"true"}, "filters": {filtersQuery(map[string][]string{"label": labelFilters(labels)})}}
	resp, err := p.call(ctx, request{op: "podman ps --all", method: http.MethodGet, path: "/containers/json", query: q})
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	defer resp.Body.Close()
	out, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	list, err := parsePS(out)
	if err != nil {
		return nil, fmt.Errorf("list containers: %w", err)
	}
	// podman ANDs label filters; check again so a podman that ORs them
	// cannot widen the result.
	kept := list[:0]
	for _, c := range list {
		if matchLabels(c.Labels, labels) {
			kept = append(kept, c)
		}
	}
	return kept, nil
}

func checkID(id string) error {
	if strings.TrimSpace(id) == "" {
		return fmt.Errorf("%w: container id: is required", ErrInvalidSpec)
	}
	return nil
}

func matchLabels(have, want map[string]string) bool {
	if have[LabelManaged] != "true" {
		return false
	}
	for k, v := range want {
		if got, ok := have[k]; !ok || got != v {
			return false
		}
	}
	return true
}

// podmanState maps podman's state words to State.
func podmanState(s string) State {
	switch strings.ToLower(s) {
	case "created", "configured", "initialized":
		return StateCreated
	case "running":
		return StateRunning
	case "paused":
		return StatePaused
	case "exited", "stopped", "stopping":
		return StateExited
	}
	return StateUnknown
}

// psEntry is one element of a container listing (GET /containers/json,
// podman 4.3; `podman ps --format json` prints the same).
type psEntry struct {
	ID       string            `json:"Id"`
	Names    []string          `json:"Names"`
	Image    string            `json:"Image"`
	ImageID  string            `json:"ImageID"`
	Labels   map[string]string `json:"Labels"`
	State    string            `json:"State"`
	ExitCode int               `json:"ExitCode"`
	Exited   bool              `json:"Exited"`
	ExitedAt int64             `json:"ExitedAt"`
	Started  int64             `json:"StartedAt"`
	Created  json.RawMessage   `json:"Created"`
	Pid      int               `json:"Pid"`
	Ports    []struct {
		HostIP        string `json:"host_ip"`
		ContainerPort int    `json:"container_port"`
		HostPort      int    `json:"host_port"`
		Range         int    `json:"range"`
		Protocol      string `json:"protocol"`
	} `json:"Ports"`
}

func parsePS(out []byte) ([]ContainerStatus, error) {
	out = bytes.TrimSpace(out)
	if len(out) == 0 || bytes.Equal(out, []byte("null")) {
		return nil, nil
	}
	var entries []psEntry
	if err := json.Unmarshal(out, &entries); err != nil {
		return nil, fmt.Errorf("parse podman ps output: %w", err)
	}
	list := make([]ContainerStatus, 0, len(entries))
	for _, e := range entries {
		c := ContainerStatus{
			ID:        e.ID,
			Image:     e.Image,
			ImageID:   e.ImageID,
			Labels:    e.Labels,
			State:     podmanState(e.State),
			RawState:  e.State,
			ExitCode:  e.ExitCode,
			Pid:       e.Pid,
			CreatedAt: parseCreated(e.Created),
			StartedAt: unixTime(e.Started),
		}
		if c.Labels == nil {
			c.Labels = map[string]string{}
		}
		if len(e.Names) > 0 {
			c.Name = e.Names[0]
		}
		if c.State == StateExited || e.Exited {
			c.FinishedAt = unixTime(e.ExitedAt)
		}
		for _, pt := range e.Ports {
			n := max(pt.Range, 1)
			for i := range n {
				c.Ports = append(c.Ports, PortMapping{
					HostIP: pt.HostIP, HostPort: pt.HostPort + i,
					ContainerPort: pt.ContainerPort + i, Protocol: pt.Protocol,
				})
			}
		}
		list = append(list, c)
	}
	return list, nil
}

// parseCreated reads a listing's Created: an RFC 3339 time (the REST
// service's) or a unix time (the CLI's).
func parseCreated(raw json.RawMessage) time.Time {
	var n int64
	if json.Unmarshal(raw, &n) == nil {
		return unixTime(n)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			return realTime(t)
		}
	}
	return time.Time{}
}

// unixTime turns podman's unix seconds into a time; zero and Go's zero time
// (-62135596800, which podman prints for "never") become the zero Time.
func unixTime(sec int64) time.Time {
	if sec <= 0 {
		return time.Time{}
	}
	return time.Unix(sec, 0).UTC()
}

// inspectEntry is the part of a container's inspect (GET
// /containers/{id}/json, podman 4.3) the runtime reads.
type inspectEntry struct {
	ID        string    `json:"Id"`
	Name      string    `json:"Name"`
	Created   time.Time `json:"Created"`
	Image     string    `json:"Image"`
	ImageName string    `json:"ImageName"`
	State     struct {
		Status     string    `json:"Status"`
		Running    bool      `json:"Running"`
		Paused     bool      `json:"Paused"`
		OOMKilled  bool      `json:"OOMKilled"`
		Pid        int       `json:"Pid"`
		ConmonPid  int       `json:"ConmonPid"`
		ExitCode   int       `json:"ExitCode"`
		StartedAt  time.Time `json:"StartedAt"`
		FinishedAt time.Time `json:"FinishedAt"`
	} `json:"State"`
	RestartCount int `json:"RestartCount"`
	Config       struct {
		Labels map[string]string `json:"Labels"`
	} `json:"Config"`
	NetworkSettings struct {
		Networks map[string]struct {
			IPAddress         string `json:"IPAddress"`
			GlobalIPv6Address string `json:"GlobalIPv6Address"`
		} `json:"Networks"`
		Ports map[string][]struct {
			HostIP   string `json:"HostIp"`
			HostPort string `json:"HostPort"`
		} `json:"Ports"`
	} `json:"NetworkSettings"`
}

// parseInspect reads the service's inspect of one container.
func parseInspect(out []byte) (*ContainerStatus, error) {
	e, err := decodeInspect(out)
	if err != nil {
		return nil, err
	}
	return e.status(), nil
}

// decodeInspect decodes the service's inspect of one container.
func decodeInspect(out []byte) (*inspectEntry, error) {
	var e inspectEntry
	if err := json.Unmarshal(bytes.TrimSpace(out), &e); err != nil {
		return nil, fmt.Errorf("parse podman inspect output: %w", err)
	}
	if e.ID == "" {
		return nil, fmt.Errorf("parse podman inspect output: no container ID in %q", truncate(out, 200))
	}
	return &e, nil
}

// addrs are the container's addresses on its networks.
func (e *inspectEntry) addrs() []netip.Addr {
	var out []netip.Addr
	for _, n := range e.NetworkSettings.Networks {
		for _, s := range []string{n.IPAddress, n.GlobalIPv6Address} {
			if a, err := netip.ParseAddr(s); err == nil {
				out = append(out, a)
			}
		}
	}
	return out
}

// status is what the runtime reads of an inspect.
func (e *inspectEntry) status() *ContainerStatus {
	c := &ContainerStatus{
		ID:           e.ID,
		Name:         e.Name,
		Image:        e.ImageName,
		ImageID:      e.Image,
		Labels:       e.Config.Labels,
		State:        podmanState(e.State.Status),
		RawState:     e.State.Status,
		ExitCode:     e.State.ExitCode,
		OOMKilled:    e.State.OOMKilled,
		Pid:          e.State.Pid,
		CreatedAt:    realTime(e.Created),
		StartedAt:    realTime(e.State.StartedAt),
		FinishedAt:   realTime(e.State.FinishedAt),
		RestartCount: e.RestartCount,
	}
	if c.Labels == nil {
		c.Labels = map[string]string{}
	}
	for _, key := range sortedKeys(portKeys(e.NetworkSettings.Ports)) {
		cport, proto, _ := strings.Cut(key, "/")
		cp, err := strconv.Atoi(cport)
		if err != nil {
			continue
		}
		for _, b := range e.NetworkSettings.Ports[key] {
			hp, err := strconv.Atoi(b.HostPort)
			if err != nil {
				continue
			}
			c.Ports = append(c.Ports, PortMapping{HostIP: b.HostIP, HostPort: hp, ContainerPort: cp, Protocol: proto})
		}
	}
	return c
}

func portKeys[V any](m map[string]V) map[string]string {
	keys := make(map[string]string, len(m))
	for k := range m {
		keys[k] = ""
	}
	return keys
}

// realTime turns podman's "never" (year 1) into the zero Time.
func realTime(t time.Time) time.Time {
	if t.Year() <= 1 {
		return time.Time{}
	}
	return t.UTC()
}
