package build

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// Prune removes the kat-local images of a workload beyond the newest
// Config.KeepImages, never one that a container (running or not) uses. It
// returns the names removed.
func (b *Builder) Prune(ctx context.Context, namespace, workload string) ([]string, error) {
	if !quadlet.IsDNSLabel(namespace) || !quadlet.IsDNSLabel(workload) {
		return nil, fmt.Errorf("%w: prune images of %q/%q: namespace and workload must be DNS labels", ErrInvalid, namespace, workload)
	}
	return b.prune(ctx, namespace, workload, "")
}

func (b *Builder) prune(ctx context.Context, namespace, workload, protect string) ([]string, error) {
	b.pruneMu.Lock()
	defer b.pruneMu.Unlock()
	repo := api.ImageRepository(namespace, workload)
	imgs, err := b.pm.listImages(ctx, repo)
	if err != nil {
		return nil, fmt.Errorf("housekeeping: %w", err)
	}
	used, err := b.pm.imagesInUse(ctx)
	if err != nil {
		return nil, fmt.Errorf("housekeeping: %w", err)
	}
	var removed []string
	var errs []error
	for _, name := range planPrune(imgs, used, b.cfg.KeepImages, protect) {
		err := b.cfg.Podman.RemoveImage(ctx, name)
		switch {
		case err == nil:
			removed = append(removed, name)
		case errors.Is(err, runtime.ErrInUse), errors.Is(err, runtime.ErrImageNotFound):
			// a container took it, or someone else removed it, meanwhile
		default:
			errs = append(errs, err)
		}
	}
	if err := errors.Join(errs...); err != nil {
		return removed, fmt.Errorf("housekeeping of %s: %w", repo, err)
	}
	return removed, nil
}

// planPrune decides which image names to remove: all but the keep newest
// (by creation, then name), except those whose image a container uses and
// the name protect.
func planPrune(imgs []imageInfo, used map[string]bool, keep int, protect string) []string {
	imgs = slices.Clone(imgs)
	slices.SortFunc(imgs, func(a, b imageInfo) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(b.Name, a.Name)
	})
	var remove []string
	for i, im := range imgs {
		if i < keep || used[im.ID] || im.Name == protect {
			continue
		}
		remove = append(remove, im.Name)
	}
	return remove
}
