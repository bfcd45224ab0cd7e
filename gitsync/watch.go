package gitsync

import (
	"context"
	"net/url"
	"path/filepath"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/filewatch"
)

// watchedFiles returns the files on this machine whose change wakes a
// source's loop at once rather than at its next poll: for a file://
// source, its branch's ref and packed-refs (of the repository, or of both
// layouts while none exists yet); for any source, the credential and
// keyring files read at every sync, so that a fixed credential is tried at
// once.
func watchedFiles(spec api.SourceSpec) []string {
	var files []string
	if u, err := url.Parse(spec.URL); err == nil && u.Scheme == "file" && u.Host == "" && filepath.IsAbs(u.Path) {
		dirs := []string{filepath.Join(u.Path, ".git"), u.Path}
		if dir := localRepoDir(spec.URL); dir != "" {
			dirs = []string{dir}
		}
		for _, dir := range dirs {
			files = append(files,
				filepath.Join(dir, "refs", "heads", filepath.FromSlash(spec.Branch)),
				filepath.Join(dir, "packed-refs"))
		}
	}
	a := spec.Auth
	for _, f := range []string{a.TokenFile, a.BasicAuthFile, a.SSHKeyFile, a.KnownHostsFile, spec.KeyringFile} {
		if f != "" {
			files = append(files, f)
		}
	}
	return files
}

// watch triggers the source whenever one of its watched files changes,
// until ctx ends. The trigger runs the ordinary sync, which reads the
// branch head and compares it with the applied commit, so a spurious wake
// costs one ref read; the poll goes on regardless.
func (s *source) watch(ctx context.Context) {
	files := watchedFiles(s.spec)
	if len(files) == 0 {
		return
	}
	// Run returns only when ctx ends.
	_ = filewatch.Run(ctx, filewatch.Config{Files: files, Logger: s.log}, s.Trigger)
}
