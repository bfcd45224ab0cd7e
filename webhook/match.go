package webhook

import (
	"net/url"
	"strings"
)

// RepoKey reduces a repository URL to a key that every URL form of the same
// repository shares: the lowercased host name (no user, no port) and path,
// without a ".git" suffix or surrounding slashes. So
// https://github.com/Ops/Config.git, git@github.com:ops/config.git,
// ssh://git@github.com:22/ops/config and https://github.com/ops/config all
// give "github.com/ops/config"; file:///srv/config.git gives
// "file:///srv/config". It returns "" for what is not a repository URL.
//
// The key is only for matching a push to a source: a false match costs one
// needless fetch, never wrong content, since KAT fetches from the source's
// own URL.
func RepoKey(raw string) string {
	raw = strings.TrimSpace(raw)
	var host, p string
	switch u, err := url.Parse(raw); {
	case err == nil && u.Scheme == "file":
		return "file://" + strings.TrimSuffix(strings.TrimRight(u.Path, "/"), ".git")
	case err == nil && u.Scheme != "" && u.Host != "":
		host, p = u.Hostname(), u.Path
	default:
		// scp-like syntax: [user@]host:path
		hostPart, pathPart, ok := strings.Cut(raw, ":")
		if !ok || strings.Contains(hostPart, "/") || pathPart == "" {
			return ""
		}
		if _, h, ok := strings.Cut(hostPart, "@"); ok {
			hostPart = h
		}
		host, p = hostPart, pathPart
	}
	p = strings.TrimSuffix(strings.Trim(p, "/"), ".git")
	if host == "" || p == "" {
		return ""
	}
	return strings.ToLower(host + "/" + p)
}

// Matches reports whether p is a push to the repository at sourceURL (in
// any of its URL forms, compared by [RepoKey]) and to branch, given as a
// name ("main") or a full ref ("refs/heads/main").
func (p Push) Matches(sourceURL, branch string) bool {
	if !strings.HasPrefix(branch, "refs/") {
		branch = "refs/heads/" + branch
	}
	key := RepoKey(sourceURL)
	if key == "" || p.Ref != branch {
		return false
	}
	for _, u := range p.RepoURLs {
		if RepoKey(u) == key {
			return true
		}
	}
	return false
}
