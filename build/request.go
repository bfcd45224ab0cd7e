package build

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
)

// Request asks for the image of one commit of a workload.
type Request struct {
	// Namespace and Workload name the workload; both are DNS labels.
	Namespace string
	Workload  string
	// Repository is the app repository's URL (workload.kat
	// spec.source.git.repository): https://, http://, ssh://, file:// or
	// scp-like user@host:path.
	Repository string
	// Commit is the full commit hash (40 hex digits) the leader
	// resolved the branch or tag to.
	Commit string
	// Ref, when set, is the branch or tag (refs/heads/NAME, refs/tags/NAME)
	// Commit was resolved from: fetching its head alone, at depth 1, is the
	// cheapest way to the commit while the ref has not moved on, and works
	// with any server. Default "": fetch the commit by its hash.
	Ref string
	// Auth holds the credential files for Repository. Default: none.
	Auth api.GitAuth
	// Spec is build.kat's spec. Empty BuildContext and DockerfilePath
	// default to "." and "Dockerfile".
	Spec quadlet.BuildSpec
	// CacheImage is workload.kat's spec.source.cacheImage, used as the
	// cache registry path when Spec.Cache names none. Default none.
	CacheImage string
	// UserNSSlot is the workload's slot of Config.SubIDs
	// (api.Assignment.UserNSSlot): RUN steps run with the uid map
	// its containers get. Default nil: the range's last slot.
	UserNSSlot *int
}

var commitRE = regexp.MustCompile(`^[0-9a-f]{40}$`)

// Image returns the request's local image name.
func (r *Request) Image() string { return api.ImageName(r.Namespace, r.Workload, r.Commit) }

// RegistryPath returns the cache registry path: Spec.Cache.RegistryPath,
// else CacheImage, else "".
func (r *Request) RegistryPath() string {
	if r.Spec.Cache != nil && r.Spec.Cache.RegistryPath != "" {
		return r.Spec.Cache.RegistryPath
	}
	return r.CacheImage
}

func (r *Request) key() string { return r.Namespace + "/" + r.Workload + "@" + r.Commit }

// normalize fills in defaults and checks the request, naming the bad field.
// The result is an ErrInvalid.
func (r *Request) normalize() error {
	r.Commit = strings.ToLower(strings.TrimSpace(r.Commit))
	if r.Spec.BuildContext == "" {
		r.Spec.BuildContext = "."
	}
	if r.Spec.DockerfilePath == "" {
		r.Spec.DockerfilePath = "Dockerfile"
	}
	bad := func(field, format string, args ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalid, field, fmt.Sprintf(format, args...))
	}
	switch {
	case !quadlet.IsDNSLabel(r.Namespace):
		return bad("namespace", "%q is not a DNS label", r.Namespace)
	case !quadlet.IsDNSLabel(r.Workload):
		return bad("workload", "%q is not a DNS label", r.Workload)
	case strings.TrimSpace(r.Repository) == "":
		return bad("repository", "is required")
	case !commitRE.MatchString(r.Commit):
		return bad("commit", "%q is not a full commit hash (40 hex digits)", r.Commit)
	}
	if msg := insideRepo(r.Spec.BuildContext); msg != "" {
		return bad("spec.buildContext", "%s", msg)
	}
	if msg := insideRepo(path.Join(r.Spec.BuildContext, r.Spec.DockerfilePath)); msg != "" || path.IsAbs(r.Spec.DockerfilePath) {
		return bad("spec.dockerfilePath", "%q must stay inside the repository", r.Spec.DockerfilePath)
	}
	for k := range r.Spec.BuildArgs {
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return bad("spec.buildArgs", "key %q must be non-empty without '=' or spaces", k)
		}
	}
	for field, v := range map[string]string{
		"spec.targetStage": r.Spec.TargetStage, "spec.platform": r.Spec.Platform, "cache registry path": r.RegistryPath(),
	} {
		if strings.ContainsFunc(v, func(c rune) bool { return c <= ' ' }) || strings.HasPrefix(v, "-") {
			return bad(field, "%q must not contain spaces or start with '-'", v)
		}
	}
	return nil
}

// insideRepo checks a slash-separated path relative to the repository
// root; it returns what is wrong, or "".
func insideRepo(p string) string {
	if path.IsAbs(p) {
		return fmt.Sprintf("%q must be a relative path", p)
	}
	if c := path.Clean(p); c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Sprintf("%q must not point outside the repository", p)
	}
	return ""
}
