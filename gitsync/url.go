package gitsync

import "kat.dws.rip/kat/build/gitauth"

// RedactURL removes any user information from a URL, for errors and logs.
func RedactURL(raw string) string { return gitauth.RedactURL(raw) }

// redactMessage replaces every credential-bearing form of rawURL in msg.
func redactMessage(msg, rawURL string) string {
	return gitauth.NewRedactor(rawURL).String(msg)
}
