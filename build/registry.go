package build

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"kat.dws.rip/kat/runtime"
)

// cacheProbe is what a look at the cache registry found.
type cacheProbe int

const (
	// probeUnknown: the registry could not tell (it wants a token, or
	// answered oddly); pulling tells.
	probeUnknown cacheProbe = iota
	// probeMissing: the registry answered that the tag does not exist, or
	// could not be reached at all: a miss, no pull.
	probeMissing
	// probePresent: the tag exists; pull it.
	probePresent
)

// probeTimeout bounds a look at the cache registry.
const probeTimeout = 5 * time.Second

// manifestTypes are the manifest media types a cache image may have.
var manifestTypes = []string{
	"application/vnd.oci.image.manifest.v1+json",
	"application/vnd.oci.image.index.v1+json",
	"application/vnd.docker.distribution.manifest.v2+json",
	"application/vnd.docker.distribution.manifest.list.v2+json",
}

// probeCache asks the cache registry (Docker registry API v2) whether ref
// (host/path:tag) exists, with one HEAD request: a miss costs milliseconds
// instead of a podman pull (which, for an unreachable registry, retries for
// seconds). Credentials come from the podman auth file, as basic auth; a
// registry that wants a token leaves the answer to the pull.
func (b *Builder) probeCache(ctx context.Context, ref string) (cacheProbe, string) {
	host := registryHost(ref)
	path, tag, ok := strings.Cut(strings.TrimPrefix(ref, host+"/"), ":")
	if !ok || host == "docker.io" {
		return probeUnknown, "not a reference to a registry of its own"
	}
	scheme := "https"
	client := &http.Client{Timeout: probeTimeout}
	if slices.Contains(b.cfg.InsecureRegistries, host) {
		scheme = "http"
	}
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodHead, scheme+"://"+host+"/v2/"+path+"/manifests/"+tag, nil)
	if err != nil {
		return probeUnknown, err.Error()
	}
	req.Header.Set("Accept", strings.Join(manifestTypes, ", "))
	if user, pass, ok := runtime.RegistryCredentials(b.cfg.AuthFile, host); ok {
		req.SetBasicAuth(user, pass)
	}
	resp, err := client.Do(req)
	if err != nil {
		if ctx.Err() == nil && isUnreachable(err) {
			return probeMissing, fmt.Sprintf("registry %s unreachable: %v", host, err)
		}
		return probeUnknown, err.Error()
	}
	resp.Body.Close()
	switch resp.StatusCode {
	case http.StatusOK:
		return probePresent, ""
	case http.StatusNotFound:
		return probeMissing, fmt.Sprintf("%s is not in the registry", ref)
	}
	return probeUnknown, fmt.Sprintf("registry %s answered %s", host, resp.Status)
}

// isUnreachable reports whether a request failed before any registry
// answered: nothing listens, or TLS is not what the registry speaks.
func isUnreachable(err error) bool {
	s := err.Error()
	return strings.Contains(s, "connection refused") || strings.Contains(s, "no such host") ||
		strings.Contains(s, "server gave HTTP response to HTTPS client")
}
