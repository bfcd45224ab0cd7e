// Package filewatch tells its owner when files it depends on change on disk:
// a config repository's refs, a webhook secret, credentials, certificates.
// Run watches the files' parent directories with fsnotify and calls back
// once per burst of changes; Value keeps something parsed from files (a
// certificate, a secret) current, and keeps the last good value when a
// change cannot be parsed.
//
//	err := filewatch.Run(ctx, filewatch.Config{Files: []string{refFile}}, src.Trigger)
//
//	secret := filewatch.NewValue(filewatch.Config{Files: []string{path}, Logger: log}, parseSecret)
//	go secret.Run(ctx)       // reload as the file changes
//	b, err := secret.Get()   // the current value, or the last good one
//
// # Watching
//
// Directories are watched, never the files themselves: an editor or an
// atomic writer (write a temporary file, rename it over the old one)
// replaces the file, which would end a watch on it. Events are filtered to
// the files' names, and to names starting with "..", so that a Kubernetes
// Secret or ConfigMap volume, which swaps a "..data" symlink, is followed;
// the directories of the files' symlink targets are watched too and are
// looked up again after every change. Config.Dirs watches every entry of
// whole directories instead (a directory of certificate pairs whose names
// are not known in advance). Watching is not recursive.
//
// A burst of events (a git push writes a lock file, renames it, packs refs)
// makes one call, Config.Debounce after the first event. The callback is a
// wake-up, not a description: its owner re-reads what it needs
// (level-triggered), so a spurious call costs one read and a lost event is
// made good by the owner's own periodic resync.
//
// When a directory cannot be watched (it does not exist yet, inotify's
// limits are reached, the file system sends no events), Run logs why, and
// until the watch is back it tries again and calls back every
// Config.Fallback: polling replaces the events.
//
// # Values
//
// A Value reads and parses its files when made, again after every change
// the watch reports (while Run runs), and whenever Get finds that a file's
// identity, size, modification or change time differ from the last load, so
// that a value is never older than its files, even before the watcher's
// event arrives. A change that cannot be read or parsed (a missing file, a
// half-written or malformed PEM) keeps the last good value; the failure is
// logged once, naming the files, and Err reports it until the files are
// good again.
package filewatch
