package gitsync

import (
	"github.com/go-git/go-git/v5/plumbing/transport"

	"kat.dws.rip/kat/build/gitauth"
	"kat.dws.rip/kat/store/resources"
)

// authFor reads the credential files of a source, on every call so that a
// rotated secret is picked up. Errors name the file, never its content.
// The reading is gitauth's, shared with build.
func authFor(a resources.SourceAuth) (transport.AuthMethod, error) {
	return gitauth.Method(gitauth.Files(a))
}
