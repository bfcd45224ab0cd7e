package gitx

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"regexp"
	"strings"
)

// RedactURL removes the credentials from a URL, for errors and logs: the
// whole user information of an http(s) URL (a user name there may be a
// token, as in https://TOKEN@host/repo.git) and the password of any other
// (an ssh user name such as git@ is kept: it is part of how the repository
// is named). Strings without credentials, such as scp-like addresses, are
// returned unchanged; one that does not parse as a URL loses everything
// between "://" and the last "@" of its host part.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return dropUserinfo(raw)
	}
	if u.User == nil {
		return raw
	}
	switch u.Scheme {
	case "http", "https":
		u.User = nil
	default:
		if _, ok := u.User.Password(); !ok {
			return raw
		}
		u.User = url.User(u.User.Username())
	}
	return u.String()
}

// dropUserinfo removes the user information of a URL url.Parse refused.
func dropUserinfo(raw string) string {
	scheme, rest, ok := strings.Cut(raw, "://")
	if !ok {
		return raw
	}
	end := strings.IndexAny(rest, "/?#")
	if end < 0 {
		end = len(rest)
	}
	at := strings.LastIndex(rest[:end], "@")
	if at < 0 {
		return raw
	}
	return scheme + "://" + rest[at+1:]
}

// userinfoRE matches "scheme://userinfo@" of a URL inside any text: the user
// information runs to the last "@" before the host's end.
var userinfoRE = regexp.MustCompile(`(?i)\b([a-z][a-z0-9+.-]*://)([^/?#\s"'<>]*)@`)

// stripUserinfo applies RedactURL's rule to every URL in s.
func stripUserinfo(s string) string {
	return userinfoRE.ReplaceAllStringFunc(s, func(m string) string {
		sub := userinfoRE.FindStringSubmatch(m)
		scheme, info := sub[1], sub[2]
		switch strings.ToLower(scheme) {
		case "http://", "https://":
			return scheme
		}
		user, _, hasPassword := strings.Cut(info, ":")
		if !hasPassword {
			return m
		}
		return scheme + user + "@"
	})
}

// A Redactor removes the credentials of one URL from messages: the user
// information of every URL in them, by RedactURL's rule, and the URL's
// password wherever else it appears, plain or escaped, replaced by "***".
// The zero Redactor knows no password and only strips URLs.
type Redactor struct {
	replace *strings.Replacer // nil: no password
}

// NewRedactor returns the Redactor for rawURL.
func NewRedactor(rawURL string) Redactor {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return Redactor{}
	}
	p, ok := u.User.Password()
	if !ok || p == "" {
		return Redactor{}
	}
	pairs := []string{p, "***"}
	for _, e := range []string{url.PathEscape(p), url.QueryEscape(p), url.UserPassword("", p).String()[1:]} {
		if e != p {
			pairs = append(pairs, e, "***")
		}
	}
	return Redactor{replace: strings.NewReplacer(pairs...)}
}

// String returns s without the credentials.
func (r Redactor) String(s string) string {
	if r.replace != nil {
		s = r.replace.Replace(s)
	}
	return stripUserinfo(s)
}

// redactedError keeps the chain of err (errors.Is and errors.As still work)
// and hides credentials in its message.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Error returns err with the credentials removed from its message; the
// chain of err is kept, so errors.Is and errors.As still work. A nil err
// stays nil.
func (r Redactor) Error(err error) error {
	if err == nil {
		return nil
	}
	msg := r.String(err.Error())
	if msg == err.Error() {
		return err
	}
	return &redactedError{msg: msg, err: err}
}

// fail wraps err with what was being done (which names the redacted URL),
// adds ctx's error to the chain when ctx ended (go-git does not always wrap
// it), and removes rawURL's credentials from the message, and the trailing
// newline a server's message may bring.
func fail(ctx context.Context, rawURL, doing string, err error) error {
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		err = fmt.Errorf("%w (%w)", cerr, err)
	}
	err = fmt.Errorf("%s: %w", doing, err)
	return &redactedError{msg: strings.TrimSpace(NewRedactor(rawURL).String(err.Error())), err: err}
}
