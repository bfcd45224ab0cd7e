package build

import (
	"context"
	"errors"
	"fmt"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx"
)

var (
	// ErrInvalid means the request is invalid (a name, the commit, a path
	// leaving the repository): retrying cannot help.
	ErrInvalid = errors.New("build: invalid request")
	// ErrFailed matches every *FailedError.
	ErrFailed = errors.New("build: failed")
	// ErrClosed means the Builder was closed.
	ErrClosed = errors.New("build: builder closed")
	// ErrLogNotFound means there is no log of that build on this node.
	ErrLogNotFound = errors.New("build: log not found")
)

// Stages of a build, as FailedError.Stage.
const (
	// StageClone is fetching the commit and checking it out.
	StageClone = "clone"
	// StageContext is resolving the build context and Dockerfile in the
	// checkout.
	StageContext = "context"
	// StageBuild is podman build.
	StageBuild = "build"
)

// FailedError is a build that failed. errors.Is(err, ErrFailed) holds, and
// Unwrap yields the cause (ErrInvalid for a path that leaves the
// repository, context.DeadlineExceeded for a timeout, ...).
type FailedError struct {
	// Namespace, Workload and Commit name the build.
	Namespace, Workload, Commit string
	// Stage is StageClone, StageContext or StageBuild.
	Stage string
	// LogTail is the end of the build log (at most about 4 KiB).
	LogTail string
	// Err is the cause.
	Err error
}

func (e *FailedError) Error() string {
	return fmt.Sprintf("build %s/%s at %s: %s: %v", e.Namespace, e.Workload, api.ShortCommit(e.Commit), e.Stage, e.Err)
}

func (e *FailedError) Unwrap() error { return e.Err }

// Is reports whether target is ErrFailed.
func (e *FailedError) Is(target error) bool { return target == ErrFailed }

// Stalled reports whether retrying the same commit cannot help: the
// Dockerfile or the paths are wrong, as opposed to a network failure while
// cloning.
func (e *FailedError) Stalled() bool {
	if errors.Is(e.Err, context.DeadlineExceeded) || errors.Is(e.Err, context.Canceled) {
		return false
	}
	return e.Stage != StageClone || errors.Is(e.Err, ErrInvalid) || errors.Is(e.Err, gitx.ErrCommitNotFound)
}
