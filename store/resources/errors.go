package resources

import (
	"errors"
	"fmt"

	"kat.dws.rip/kat/api"
)

// Errors returned by this package; match them with errors.Is.
var (
	ErrNotFound          = errors.New("resources: not found")
	ErrAlreadyExists     = errors.New("resources: already exists")
	ErrConflict          = errors.New("resources: conflict")
	ErrNamespaceNotEmpty = errors.New("resources: namespace not empty")
	ErrProtected         = errors.New("resources: protected")
	// ErrInvalid is returned for a request that can never succeed as made,
	// such as a rollback to a generation that is not older.
	ErrInvalid = errors.New("resources: invalid request")
	// ErrSuspended is returned to a Git write of a workload whose Git
	// management is suspended.
	ErrSuspended = errors.New("resources: git management suspended")
)

// OwnershipError is returned when a writer that does not own a workload tries
// to change it. It matches ErrConflict.
type OwnershipError struct {
	Namespace, Name string
	Owner           api.Owner
}

func (e *OwnershipError) Error() string {
	return fmt.Sprintf("workload %s/%s is managed by %s: change it there, or use --force to take it over and suspend Git management",
		e.Namespace, e.Name, e.Owner)
}

// Is makes an OwnershipError match ErrConflict.
func (e *OwnershipError) Is(target error) bool { return target == ErrConflict }
