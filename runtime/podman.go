package runtime

import (
	"context"
	"errors"
	"io"
	"time"
)

// PodmanConfig configures a Podman driver. The zero value uses podman from
// PATH with its default storage.
type PodmanConfig struct {
	// Binary is the podman executable. Default "podman" (looked up in
	// PATH).
	Binary string
	// Root is podman's storage root (--root). Default "": podman's.
	Root string
	// RunRoot is podman's run root (--runroot). Default "": podman's.
	RunRoot string
	// NetworkConfigDir is where podman keeps network definitions
	// (--network-config-dir). Default "": podman's.
	NetworkConfigDir string
	// TmpDir is podman's temporary directory (--tmpdir). Default "":
	// podman's.
	TmpDir string
	// DefaultUserNS is the --userns of a ContainerSpec that names none.
	// Default "auto": container root is never host root.
	DefaultUserNS string
	// ExtraArgs are further global arguments put before every podman
	// subcommand. Default none.
	ExtraArgs []string
}

// Podman is a ContainerRuntime that runs the podman CLI.
type Podman struct {
	cfg PodmanConfig
}

var _ ContainerRuntime = (*Podman)(nil)

var errNotImplemented = errors.New("runtime: not implemented yet")

// NewPodman returns a driver with cfg's defaults filled in.
func NewPodman(cfg PodmanConfig) *Podman {
	if cfg.Binary == "" {
		cfg.Binary = "podman"
	}
	if cfg.DefaultUserNS == "" {
		cfg.DefaultUserNS = "auto"
	}
	return &Podman{cfg: cfg}
}

// PullImage implements ContainerRuntime.
func (p *Podman) PullImage(ctx context.Context, ref string, opts PullOptions) (string, error) {
	return "", errNotImplemented
}

// ImageExists implements ContainerRuntime.
func (p *Podman) ImageExists(ctx context.Context, ref string) (bool, error) {
	return false, errNotImplemented
}

// RemoveImage implements ContainerRuntime.
func (p *Podman) RemoveImage(ctx context.Context, ref string) error { return errNotImplemented }

// CreateContainer implements ContainerRuntime.
func (p *Podman) CreateContainer(ctx context.Context, spec ContainerSpec) (string, error) {
	return "", errNotImplemented
}

// StartContainer implements ContainerRuntime.
func (p *Podman) StartContainer(ctx context.Context, id string) error { return errNotImplemented }

// StopContainer implements ContainerRuntime.
func (p *Podman) StopContainer(ctx context.Context, id string, grace time.Duration) error {
	return errNotImplemented
}

// RemoveContainer implements ContainerRuntime.
func (p *Podman) RemoveContainer(ctx context.Context, id string, force bool) error {
	return errNotImplemented
}

// InspectContainer implements ContainerRuntime.
func (p *Podman) InspectContainer(ctx context.Context, id string) (*ContainerStatus, error) {
	return nil, errNotImplemented
}

// ListManagedContainers implements ContainerRuntime.
func (p *Podman) ListManagedContainers(ctx context.Context, labels map[string]string) ([]ContainerStatus, error) {
	return nil, errNotImplemented
}

// Events implements ContainerRuntime.
func (p *Podman) Events(ctx context.Context, labels map[string]string, out chan<- Event) error {
	return errNotImplemented
}

// Logs implements ContainerRuntime.
func (p *Podman) Logs(ctx context.Context, id string, opts LogOptions) (io.ReadCloser, error) {
	return nil, errNotImplemented
}

// Exec implements ContainerRuntime.
func (p *Podman) Exec(ctx context.Context, id string, cmd []string, timeout time.Duration) (ExecResult, error) {
	return ExecResult{}, errNotImplemented
}
