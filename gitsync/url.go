package gitsync

import (
	"net/url"
	"strings"
)

// RedactURL removes any user information from a URL, for errors and logs.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// redactMessage replaces every credential-bearing form of rawURL in msg.
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
