package gitsync

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path"
	"path/filepath"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// Source defaults.
const (
	DefaultBranch          = "main"
	DefaultPath            = "."
	DefaultIntervalSeconds = quadlet.DefaultPollIntervalSeconds
	MinIntervalSeconds     = 5
	MaxIntervalSeconds     = 86400
	// ClusterSourceName is the name of the source cluster.kat's spec.gitops
	// creates.
	ClusterSourceName = "config"
)

// ErrInvalidSpec is wrapped by every error of ValidateSpec.
var ErrInvalidSpec = errors.New("gitsync: invalid source spec")

// SpecFromGitOps turns cluster.kat's spec.gitops into the first source.
func SpecFromGitOps(g *quadlet.GitOpsConfig) api.SourceSpec {
	return api.SourceSpec{
		Name: ClusterSourceName, URL: g.Repository, Branch: g.Branch, Path: g.Path,
		IntervalSeconds: g.PollIntervalSeconds, KeyringFile: g.KeyringFile,
		Auth: api.GitAuth{TokenFile: g.TokenFile, SSHKeyFile: g.SSHKeyFile, KnownHostsFile: g.KnownHostsFile},
	}
}

// Defaulted returns spec with its defaults filled in.
func Defaulted(spec api.SourceSpec) api.SourceSpec {
	if spec.Branch == "" {
		spec.Branch = DefaultBranch
	}
	if spec.Path == "" {
		spec.Path = DefaultPath
	}
	spec.Path = path.Clean(spec.Path)
	if spec.IntervalSeconds == 0 {
		spec.IntervalSeconds = DefaultIntervalSeconds
	}
	return spec
}

// ValidateSpec checks a defaulted spec; the error names every bad field and
// wraps ErrInvalidSpec.
func ValidateSpec(spec api.SourceSpec) error {
	var errs []error
	bad := func(field, format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", field, fmt.Sprintf(format, args...)))
	}
	if !quadlet.IsDNSLabel(spec.Name) {
		bad("name", "%q must be a DNS label (lowercase letters, digits and '-')", spec.Name)
	}
	if msg := checkURL(spec.URL); msg != "" {
		bad("url", "%s", msg)
	}
	if msg := checkBranch(spec.Branch); msg != "" {
		bad("branch", "%s", msg)
	}
	if p := spec.Path; p != "." && (path.IsAbs(p) || p == ".." || strings.HasPrefix(p, "../") || strings.ContainsAny(p, "\\\x00")) {
		bad("path", "%q must be a relative path inside the repository", p)
	}
	if spec.IntervalSeconds < MinIntervalSeconds || spec.IntervalSeconds > MaxIntervalSeconds {
		bad("intervalSeconds", "must be between %d and %d, got %d", MinIntervalSeconds, MaxIntervalSeconds, spec.IntervalSeconds)
	}
	a := spec.Auth
	for _, f := range []struct{ field, v string }{
		{"auth.tokenFile", a.TokenFile}, {"auth.basicAuthFile", a.BasicAuthFile},
		{"auth.sshKeyFile", a.SSHKeyFile}, {"auth.knownHostsFile", a.KnownHostsFile}, {"keyringFile", spec.KeyringFile},
	} {
		if f.v != "" && (!filepath.IsAbs(f.v) || filepath.Clean(f.v) != f.v) {
			bad(f.field, "%q must be a clean absolute path", f.v)
		}
	}
	if err := gitx.CheckAuth(spec.URL, a); err != nil {
		errs = append(errs, err)
	}
	if len(errs) == 0 {
		return nil
	}
	return fmt.Errorf("source %q: %w: %w", spec.Name, ErrInvalidSpec, errors.Join(errs...))
}

func checkURL(s string) string {
	if s == "" {
		return "required"
	}
	if strings.ContainsAny(s, " \t\r\n\x00") {
		return "must not contain white space or control characters"
	}
	if !strings.Contains(s, "://") && gitx.IsSSH(s) {
		return "" // scp-like: [user@]host:path
	}
	u, err := url.Parse(s)
	if err != nil {
		return fmt.Sprintf("%q is not a URL", gitx.RedactURL(s))
	}
	switch u.Scheme {
	case "https", "http", "ssh":
		if u.Host == "" {
			return fmt.Sprintf("%q has no host", gitx.RedactURL(s))
		}
	case "file":
		if u.Path == "" || !path.IsAbs(u.Path) {
			return fmt.Sprintf("%q must name an absolute path", s)
		}
	default:
		return fmt.Sprintf("scheme %q is not one of https, http, ssh, file", u.Scheme)
	}
	if _, has := u.User.Password(); has {
		return "must not hold a password: put credentials in auth.tokenFile or auth.basicAuthFile"
	}
	return ""
}

func checkBranch(b string) string {
	switch {
	case b == "":
		return "required"
	case strings.HasPrefix(b, "-"), strings.HasPrefix(b, "/"), strings.HasSuffix(b, "/"), strings.HasSuffix(b, ".lock"),
		strings.Contains(b, ".."), strings.Contains(b, "//"), strings.Contains(b, "@{"),
		strings.ContainsAny(b, " ~^:?*[\\\t\r\n\x00\x7f"):
		return fmt.Sprintf("%q is not a valid branch name", b)
	}
	return ""
}

// EnsureClusterSource creates the source cluster.kat's spec.gitops names, once:
// a source that exists already (changed since with katcall source set) is
// left alone. It reports whether it created it. A gitops section that does
// not make a valid source is an error naming the field; cluster.kat was
// checked at init, so this means the rules changed since.
func EnsureClusterSource(ctx context.Context, repo *resources.Repo, g *quadlet.GitOpsConfig) (bool, error) {
	spec := Defaulted(SpecFromGitOps(g))
	if err := ValidateSpec(spec); err != nil {
		return false, fmt.Errorf("cluster.kat spec.gitops does not make a valid source: %w", err)
	}
	created, err := repo.CreateSourceSpec(ctx, spec)
	if err != nil {
		return false, fmt.Errorf("create the source of cluster.kat spec.gitops: %w", err)
	}
	return created, nil
}
