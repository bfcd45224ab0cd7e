package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
)

// PullImage implements ContainerRuntime: POST /images/pull.
func (p *Podman) PullImage(ctx context.Context, ref string, opts PullOptions) (string, error) {
	if strings.TrimSpace(ref) == "" {
		return "", fmt.Errorf("%w: image: is required", ErrInvalidSpec)
	}
	q := url.Values{"reference": {ref}, "quiet": {"true"}, "policy": {"always"}}
	if opts.Platform != "" {
		parts := strings.SplitN(opts.Platform, "/", 3)
		if len(parts) < 2 {
			return "", fmt.Errorf("%w: platform: %q is not os/arch[/variant]", ErrInvalidSpec, opts.Platform)
		}
		q.Set("OS", parts[0])
		q.Set("Arch", parts[1])
		if len(parts) == 3 {
			q.Set("Variant", parts[2])
		}
	}
	if opts.TLSVerify != nil {
		q.Set("tlsVerify", strconv.FormatBool(*opts.TLSVerify))
	}
	if opts.Progress != nil {
		q.Set("quiet", "false")
	}
	op := "podman pull " + ref
	hdr, err := registryAuthHeader(opts.AuthFile)
	if err != nil {
		return "", fmt.Errorf("pull image %s: %w", ref, err)
	}
	resp, err := p.call(ctx, request{op: op, method: http.MethodPost, path: "/images/pull", query: q, header: hdr})
	if err != nil {
		return "", fmt.Errorf("pull image %s: %w", ref, err)
	}
	defer resp.Body.Close()
	// One report (quiet), or progress reports and the last one.
	dec := json.NewDecoder(resp.Body)
	for {
		var report struct {
			Stream string `json:"stream"`
			Error  string `json:"error"`
			ID     string `json:"id"`
		}
		if err := dec.Decode(&report); err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return "", fmt.Errorf("pull image %s: %s: read the answer: %w", ref, op, err)
		}
		if report.Stream != "" && opts.Progress != nil {
			_, _ = io.WriteString(opts.Progress, report.Stream)
		}
		switch {
		case report.Error != "":
			return "", fmt.Errorf("pull image %s: %w", ref, p.answerError(ctx, op, "/images/pull", report.Error))
		case report.ID != "":
			return report.ID, nil
		}
	}
}

// answerError is the *APIError of an error the service reported inside a
// successful answer (a pull's report).
func (p *Podman) answerError(ctx context.Context, op, path, msg string) error {
	ae := &APIError{Op: op, Method: http.MethodPost, Path: path, Status: http.StatusOK, Message: trimStderr([]byte(msg)), Err: errStatus}
	if s := classify(msg); s != nil {
		ae.Err = s
	} else if ctx.Err() != nil {
		ae.Err = ctx.Err()
	}
	return ae
}

// ImageExists implements ContainerRuntime: GET /images/{name}/exists.
func (p *Podman) ImageExists(ctx context.Context, ref string) (bool, error) {
	if strings.TrimSpace(ref) == "" {
		return false, fmt.Errorf("%w: image: is required", ErrInvalidSpec)
	}
	err := p.callJSON(ctx, request{op: "podman image exists " + ref, method: http.MethodGet, path: pathOf("/images/%s/exists", ref)}, nil)
	switch {
	case err == nil:
		return true, nil
	case isStatus(err, http.StatusNotFound):
		return false, nil
	}
	return false, fmt.Errorf("check image %s: %w", ref, err)
}

// RemoveImage implements ContainerRuntime: DELETE /images/{name}.
func (p *Podman) RemoveImage(ctx context.Context, ref string) error {
	err := p.callJSON(ctx, request{op: "podman rmi " + ref, method: http.MethodDelete, path: pathOf("/images/%s", ref)}, nil)
	if err != nil {
		var ae *APIError
		if errors.As(err, &ae) && ae.Status == http.StatusNotFound && !errors.Is(err, ErrImageNotFound) {
			ae.Err = ErrImageNotFound
		}
		return fmt.Errorf("remove image %s: %w", ref, err)
	}
	return nil
}

// TagImage adds the name target (repository:tag; a tag of "latest" when it
// names none) to the local image ref.
func (p *Podman) TagImage(ctx context.Context, ref, target string) error {
	repo, tag := splitTag(target)
	err := p.callJSON(ctx, request{op: "podman tag " + ref + " " + target, method: http.MethodPost,
		path: pathOf("/images/%s/tag", ref), query: url.Values{"repo": {repo}, "tag": {tag}}}, nil)
	if err != nil {
		return fmt.Errorf("tag image %s as %s: %w", ref, target, err)
	}
	return nil
}

// UntagImage removes the name ref (repository:tag) from its image; the
// image stays while it has other names.
func (p *Podman) UntagImage(ctx context.Context, ref string) error {
	repo, tag := splitTag(ref)
	err := p.callJSON(ctx, request{op: "podman untag " + ref + " " + ref, method: http.MethodPost,
		path: pathOf("/images/%s/untag", ref), query: url.Values{"repo": {repo}, "tag": {tag}}}, nil)
	if err != nil {
		return fmt.Errorf("untag image %s: %w", ref, err)
	}
	return nil
}

// ImageID returns the ID of the local image ref.
func (p *Podman) ImageID(ctx context.Context, ref string) (string, error) {
	var img struct {
		ID string `json:"Id"`
	}
	if err := p.callJSON(ctx, request{op: "podman image inspect " + ref, method: http.MethodGet, path: pathOf("/images/%s/json", ref)}, &img); err != nil {
		return "", fmt.Errorf("inspect image %s: %w", ref, err)
	}
	return img.ID, nil
}

// ImageConfig is what an image runs when a container names no command:
// its entrypoint and its command (the entrypoint's arguments).
type ImageConfig struct {
	Entrypoint []string
	Cmd        []string
}

// Argv is the command line a container of the image runs, as Podman
// composes it: command or else the image's entrypoint, then args, or the
// image's cmd when neither command nor args are given. An entrypoint of
// [""] is none.
func (c ImageConfig) Argv(command, args []string) []string {
	entry := c.Entrypoint
	if len(entry) == 1 && entry[0] == "" {
		entry = nil
	}
	if len(command) > 0 {
		entry = command
	}
	if len(args) == 0 && len(command) == 0 {
		args = c.Cmd
	}
	return append(slices.Clone(entry), args...)
}

// ImageConfig returns the entrypoint and command of the local image ref
// (GET /images/{name}/json).
func (p *Podman) ImageConfig(ctx context.Context, ref string) (ImageConfig, error) {
	var img struct {
		Config ImageConfig `json:"Config"`
	}
	if err := p.callJSON(ctx, request{op: "podman image inspect " + ref, method: http.MethodGet, path: pathOf("/images/%s/json", ref)}, &img); err != nil {
		return ImageConfig{}, fmt.Errorf("read the entrypoint of image %s: %w", ref, err)
	}
	return img.Config, nil
}

// splitTag splits an image reference into its repository and tag
// ("latest" when it has none).
func splitTag(ref string) (repo, tag string) {
	if i := strings.LastIndexByte(ref, ':'); i > strings.LastIndexByte(ref, '/') {
		return ref[:i], ref[i+1:]
	}
	return ref, "latest"
}
