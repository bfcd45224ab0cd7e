package gitsync

import (
	"net/url"
	"strings"
)

// NormalizeURL reduces a repository URL to host and path so that the forms a
// webhook payload names (https clone URL, ssh URL, scp-like address, web
// URL) match the configured one: scheme, user, port of ssh, a ".git" suffix,
// trailing slashes and the case of the host are ignored. file:// URLs keep
// their path.
func NormalizeURL(raw string) string {
	s := strings.TrimSpace(raw)
	var host, path string
	if u, err := url.Parse(s); err == nil && u.Scheme != "" && (u.Host != "" || u.Scheme == "file") {
		host, path = strings.ToLower(u.Hostname()), u.Path
		if u.Scheme == "file" {
			host = "file"
		}
	} else if at, rest, ok := strings.Cut(s, ":"); ok && !strings.Contains(at, "/") {
		// scp-like: [user@]host:path
		if _, h, found := strings.Cut(at, "@"); found {
			at = h
		}
		host, path = strings.ToLower(at), rest
	} else {
		return strings.TrimSuffix(strings.TrimRight(s, "/"), ".git")
	}
	path = strings.TrimRight(path, "/")
	path = strings.TrimSuffix(path, ".git")
	path = strings.TrimRight(path, "/")
	if !strings.HasPrefix(path, "/") {
		path = "/" + path
	}
	return host + path
}

// RedactURL removes any user information from a URL, for errors and logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// redactError replaces every credential-bearing form of rawURL in msg.
func redactMessage(msg, rawURL string) string {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return msg
	}
	msg = strings.ReplaceAll(msg, rawURL, RedactURL(rawURL))
	if p, ok := u.User.Password(); ok && p != "" {
		msg = strings.ReplaceAll(msg, p, "***")
	}
	return msg
}
