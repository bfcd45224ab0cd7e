package api

import "time"

// BuildState is the state of a build.
type BuildState string

// Build states.
const (
	// BuildBuilding means the build (or the cache pull) is under way.
	BuildBuilding BuildState = "Building"
	// BuildSucceeded means the image exists on the node.
	BuildSucceeded BuildState = "Succeeded"
	// BuildFailed means the build failed; Build.Error says why.
	BuildFailed BuildState = "Failed"
)

// LocalImageRepository is the registry part of every image KAT builds from
// an app repository: such images never leave the node that built them.
const LocalImageRepository = "kat-local"

// ImageRepository is the local repository of the images built for workload
// namespace/workload: kat-local/{namespace}_{workload}.
func ImageRepository(namespace, workload string) string {
	return LocalImageRepository + "/" + namespace + "_" + workload
}

// ImageName is the local image name of workload namespace/workload built
// at commit, as the leader assigns it and the node's builder tags it:
// kat-local/{namespace}_{workload}:{commit12}.
func ImageName(namespace, workload, commit string) string {
	return ImageRepository(namespace, workload) + ":" + ShortCommit(commit)
}

// ShortCommit is the first 12 digits of a commit, as KAT shows it and tags
// and keys its builds ({commit12}); a shorter string is returned as it is.
func ShortCommit(commit string) string { return commit[:min(12, len(commit))] }

// ReasonBuildFailed is the reason of a workload's BuildFailed condition and
// of the event a node records for a failed build.
const ReasonBuildFailed = "BuildFailed"

// ReasonBuildSucceeded is the reason of the event of a build that made
// its image (built, or pulled from the build cache).
const ReasonBuildSucceeded = "BuildSucceeded"

// Build is what one node knows about the build of one commit of a workload
// (workload.kat spec.source.git): the builder returns it, the node stores it
// under /kat/builds/{ns}/{name}/{commit12}/{node}, and the API lists a
// workload's records with its status, newest first.
type Build struct {
	// Namespace and Workload name the workload built.
	Namespace string `json:"namespace"`
	Workload  string `json:"workload"`
	// Commit is the full commit hash built.
	Commit string `json:"commit"`
	// Node is the node that built it.
	Node string `json:"node"`
	// Image is the local image name, kat-local/{ns}_{workload}:{commit12}.
	Image string `json:"image"`
	// ImageID is the image's ID once it exists.
	ImageID string `json:"imageID,omitempty"`
	// State is Building, Succeeded or Failed.
	State BuildState `json:"state"`
	// CacheHit is true when the image came from the cache registry and
	// nothing was built.
	CacheHit bool `json:"cacheHit"`
	// Existing is true when the image was already on the node and nothing
	// was done. The builder returns such records but does not store them.
	Existing bool `json:"existing,omitempty"`
	// Shallow is true when the commit was fetched alone (depth 1), false
	// when the server did not allow it and the whole repository was
	// fetched.
	Shallow bool `json:"shallow,omitempty"`
	// StartedAt and FinishedAt bound the build; FinishedAt is zero while
	// it runs.
	StartedAt  time.Time `json:"startedAt"`
	FinishedAt time.Time `json:"finishedAt,omitzero"`
	// Error says why the build failed.
	Error string `json:"error,omitempty"`
	// Warnings are problems that did not fail the build, such as a failed
	// push to the cache registry.
	Warnings []string `json:"warnings,omitempty"`
	// LogTail is the end of the build log (at most about 4 KiB).
	LogTail string `json:"logTail,omitempty"`
	// LogPath is the build log's file on the node.
	LogPath string `json:"logPath,omitempty"`
}
