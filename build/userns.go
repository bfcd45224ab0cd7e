package build

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	"kat.dws.rip/kat/build/usernsrun"
	"kat.dws.rip/kat/runtime"
)

// ErrNoSubIDs means the node has no sub-id range for user "containers":
// RUN steps must run in a user namespace from it, so nothing is built.
var ErrNoSubIDs = errors.New("build: RUN steps run in a user namespace from the sub-id range of user containers, " +
	"and /etc/subuid and /etc/subgid have none: add \"containers:2147483647:2147483648\" to both " +
	"(scripts/install-prereqs.sh does) and restart kat-agent")

// idMapFor returns the map RUN steps run with: the workload's slot of ids
// (the map its containers get) when slot names one inside the range, else
// the range's last slot, which the leader hands out last. It also says
// which slot it is. It is pure.
func idMapFor(ids *runtime.SubIDRange, slot *int) (*runtime.IDMap, string, error) {
	if ids == nil {
		return nil, "", ErrNoSubIDs
	}
	if slot != nil {
		if m, ok := ids.Map(*slot); ok {
			return m, fmt.Sprintf("the workload's slot %d", *slot), nil
		}
	}
	last := int(ids.Slots() - 1)
	m, ok := ids.Map(last)
	if !ok {
		return nil, "", fmt.Errorf("%w (the range %d:%d holds no slot of %d ids)", ErrNoSubIDs, ids.Start, ids.Count, runtime.IDMapSize)
	}
	why := "the workload has none"
	if slot != nil {
		why = fmt.Sprintf("the workload's slot %d is outside the range", *slot)
	}
	return m, fmt.Sprintf("slot %d, the range's last (%s)", last, why), nil
}

// buildNS is how a build runs its RUN steps: podman runs them through the
// wrapper (package usernsrun), in a user namespace with map m.
type buildNS struct {
	host hostSetup
	m    runtime.IDMap
}

// globalArgs are podman's global arguments for the build.
func (n buildNS) globalArgs() []string { return []string{"--runtime", n.host.wrapper} }

// env is the environment podman passes on to the wrapper.
func (n buildNS) env() []string {
	return usernsrun.Env(n.m.HostBase, runtime.IDMapSize, n.host.runtime, n.host.overlayHome)
}

// describe says which host ids RUN steps run as, for the build log.
func (n buildNS) describe(which string) string {
	return fmt.Sprintf("RUN steps run in a user namespace: container uids and gids 0-%d are host ids %d-%d (%s of the containers sub-id range)",
		runtime.IDMapSize-1, n.m.HostBase, n.m.HostBase+runtime.IDMapSize-1, which)
}

// hostSetup is what builds need of the node, found once: the wrapper and
// the storage its mounts work on.
type hostSetup struct {
	// wrapper is the wrapper script's path.
	wrapper string
	// runtime is the OCI runtime Podman is configured with.
	runtime string
	// overlayHome is the overlay driver's directory in Podman's storage.
	overlayHome string
}

// setupTimeout bounds finding the host setup.
const setupTimeout = time.Minute

// hostSetup returns the host setup, finding it at the first call that
// succeeds: Podman's OCI runtime and storage (podman info), and that the
// wrapper answers.
func (b *Builder) hostSetup(ctx context.Context) (hostSetup, error) {
	b.setupMu.Lock()
	defer b.setupMu.Unlock()
	if b.setup != nil {
		return *b.setup, nil
	}
	ctx, cancel := context.WithTimeout(ctx, setupTimeout)
	defer cancel()
	out, err := b.pm.run(ctx, "info", "--format", "{{.Host.OCIRuntime.Path}}\n{{.Store.GraphDriverName}}\n{{.Store.GraphRoot}}")
	if err != nil {
		return hostSetup{}, fmt.Errorf("find podman's runtime and storage: %w", err)
	}
	f := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(f) != 3 || f[0] == "" || f[2] == "" {
		return hostSetup{}, fmt.Errorf("find podman's runtime and storage: unexpected podman info output %q", out)
	}
	if f[1] != "overlay" {
		return hostSetup{}, fmt.Errorf("RUN steps run in a user namespace only with podman's overlay storage driver; this storage uses %q", f[1])
	}
	if err := usernsrun.Check(ctx, b.helper); err != nil {
		return hostSetup{}, err
	}
	b.setup = &hostSetup{wrapper: b.wrapper, runtime: f[0], overlayHome: filepath.Join(f[2], "overlay")}
	return *b.setup, nil
}

// buildNS returns how req's RUN steps run, and says so in log.
func (b *Builder) buildNS(ctx context.Context, req *Request) (buildNS, string, error) {
	m, which, err := idMapFor(b.cfg.SubIDs, req.UserNSSlot)
	if err != nil {
		return buildNS{}, "", err
	}
	host, err := b.hostSetup(ctx)
	if err != nil {
		return buildNS{}, "", err
	}
	return buildNS{host: host, m: *m}, which, nil
}
