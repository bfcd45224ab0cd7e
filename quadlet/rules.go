package quadlet

import (
	"fmt"
	"net/url"
	"path"
	"regexp"
	"strings"
	"unicode"
)

// The rule functions below return "" for a valid value and otherwise a
// message for the operator.

var (
	dnsLabelRE   = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	envNameRE    = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	platformRE   = regexp.MustCompile(`^[a-z0-9]+/[a-z0-9_]+(/[a-z0-9]+)?$`)
	commitRE     = regexp.MustCompile(`^[0-9a-f]{4,64}$`)
	scpLikeGitRE = regexp.MustCompile(`^[A-Za-z0-9._~-]+@[A-Za-z0-9.-]+:[^\s]+$`)
)

// dnsLabel checks an RFC 1123 label: lowercase letters, digits and '-', at
// most 63 characters, starting and ending with a letter or digit.
func dnsLabel(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > 63:
		return fmt.Sprintf("must be at most 63 characters, got %d", len(s))
	case !dnsLabelRE.MatchString(s):
		return fmt.Sprintf("%q is not a valid name: use lowercase letters, digits and '-', starting and ending with a letter or digit", s)
	}
	return ""
}

// domainName checks a DNS name made of RFC 1123 labels, at most 253
// characters, without a trailing dot.
func domainName(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case len(s) > 253:
		return fmt.Sprintf("must be at most 253 characters, got %d", len(s))
	case strings.HasSuffix(s, "."):
		return fmt.Sprintf("%q must not end with a dot", s)
	}
	for _, label := range strings.Split(s, ".") {
		if label == "" || len(label) > 63 || !dnsLabelRE.MatchString(label) {
			return fmt.Sprintf("%q is not a valid domain name: use lowercase labels of letters, digits and '-' separated by dots", s)
		}
	}
	return ""
}

// hostName checks an ingress host: a domain name, optionally starting with
// "*." for a wildcard.
func hostName(s string) string {
	if rest, ok := strings.CutPrefix(s, "*."); ok {
		if msg := domainName(rest); msg != "" {
			return fmt.Sprintf("%q is not a valid host name", s)
		}
		return ""
	}
	return domainName(s)
}

// envName checks an environment variable name.
func envName(s string) string {
	if !envNameRE.MatchString(s) {
		return fmt.Sprintf("%q is not a valid variable name: use letters, digits and '_', not starting with a digit", s)
	}
	return ""
}

// mapKey checks a label, selector or build argument key.
func mapKey(s string) string {
	switch {
	case s == "":
		return "key must not be empty"
	case len(s) > 253:
		return "key must be at most 253 characters"
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Sprintf("key %q must not contain spaces or control characters", s)
	}
	return ""
}

// noSpace checks a free-form token such as an image reference.
func noSpace(s string) string {
	switch {
	case s == "":
		return "must not be empty"
	case strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0:
		return fmt.Sprintf("%q must not contain spaces or control characters", s)
	}
	return ""
}

// absPath checks an absolute path without ".." elements.
func absPath(s string) string {
	if msg := noSpaceOrControl(s); msg != "" {
		return msg
	}
	if !path.IsAbs(s) {
		return fmt.Sprintf("%q must be an absolute path", s)
	}
	if hasDotDot(s) {
		return fmt.Sprintf("%q must not contain \"..\"", s)
	}
	return ""
}

// cleanAbsPath checks an absolute path in its shortest form.
func cleanAbsPath(s string) string {
	if msg := absPath(s); msg != "" {
		return msg
	}
	if c := path.Clean(s); c != s {
		return fmt.Sprintf("%q must be a clean path (did you mean %q?)", s, c)
	}
	return ""
}

// relPath checks a relative path without ".." elements.
func relPath(s string) string {
	if msg := noSpaceOrControl(s); msg != "" {
		return msg
	}
	if path.IsAbs(s) {
		return fmt.Sprintf("%q must be a relative path", s)
	}
	if hasDotDot(s) {
		return fmt.Sprintf("%q must not contain \"..\"", s)
	}
	return ""
}

// insidePath checks a relative path that may use ".." but must not leave
// the directory it is relative to.
func insidePath(s string) string {
	if msg := noSpaceOrControl(s); msg != "" {
		return msg
	}
	if path.IsAbs(s) {
		return fmt.Sprintf("%q must be a relative path", s)
	}
	if c := path.Clean(s); c == ".." || strings.HasPrefix(c, "../") {
		return fmt.Sprintf("%q must not point outside the repository", s)
	}
	return ""
}

func noSpaceOrControl(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if strings.IndexFunc(s, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0 {
		return fmt.Sprintf("%q must not contain control characters", s)
	}
	return ""
}

func hasDotDot(s string) bool {
	for _, el := range strings.Split(s, "/") {
		if el == ".." {
			return true
		}
	}
	return false
}

// gitURL checks a Git repository address: an https://, http://, ssh:// or
// file:// URL, or an scp-like user@host:path. Passwords are refused so that
// secrets never sit in a Quadlet file, and are not echoed in the message.
func gitURL(s string) string {
	if s == "" {
		return "must not be empty"
	}
	if strings.IndexFunc(s, func(r rune) bool { return unicode.IsSpace(r) || !unicode.IsPrint(r) }) >= 0 {
		return "must not contain spaces or control characters"
	}
	if !strings.Contains(s, "://") {
		if scpLikeGitRE.MatchString(s) {
			return ""
		}
		return fmt.Sprintf("%q is not a Git URL: use https://, http://, ssh:// or file://, or user@host:path", s)
	}
	u, err := url.Parse(s)
	if err != nil {
		return "is not a valid URL"
	}
	if _, hasPass := u.User.Password(); hasPass {
		return "must not contain a password"
	}
	switch u.Scheme {
	case "https", "http", "ssh":
		if u.Host == "" || u.Hostname() == "" {
			return fmt.Sprintf("%q has no host", u.Redacted())
		}
	case "file":
		if u.Host != "" || !path.IsAbs(u.Path) {
			return fmt.Sprintf("%q must be file:///absolute/path", u.Redacted())
		}
	default:
		return fmt.Sprintf("scheme %q is not supported: use https, http, ssh or file", u.Scheme)
	}
	if u.RawQuery != "" || u.Fragment != "" {
		return fmt.Sprintf("%q must not have a query or fragment", u.Redacted())
	}
	return ""
}

// gitRef checks a branch or tag name the way git check-ref-format would,
// roughly.
func gitRef(s string) string {
	bad := s == "" || s == "@" || strings.HasPrefix(s, "-") || strings.HasPrefix(s, "/") ||
		strings.HasSuffix(s, "/") || strings.HasSuffix(s, ".") || strings.HasSuffix(s, ".lock") ||
		strings.Contains(s, "..") || strings.Contains(s, "//") || strings.Contains(s, "@{") ||
		strings.ContainsAny(s, " ~^:?*[\\") ||
		strings.IndexFunc(s, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0
	if bad {
		return fmt.Sprintf("%q is not a valid Git branch or tag name", s)
	}
	return ""
}

// commitHash checks an abbreviated or full commit hash.
func commitHash(s string) string {
	if !commitRE.MatchString(s) {
		return fmt.Sprintf("%q is not a commit hash: use 4 to 64 lowercase hex digits", s)
	}
	return ""
}

// platform checks os/arch[/variant].
func platform(s string) string {
	if !platformRE.MatchString(s) {
		return fmt.Sprintf("%q is not a platform: use os/arch or os/arch/variant, for example linux/arm64", s)
	}
	return ""
}

// port checks a TCP/UDP port number.
func portNumber(p int) string {
	if p < 1 || p > 65535 {
		return fmt.Sprintf("must be between 1 and 65535, got %d", p)
	}
	return ""
}
