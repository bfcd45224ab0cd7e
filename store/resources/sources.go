package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// PutSourceSpec creates or replaces a source's spec and reports whether it
// was created.
func (r *Repo) PutSourceSpec(ctx context.Context, spec api.SourceSpec) (bool, error) {
	spec.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceSpecKey(spec.Name), spec)
	if err != nil {
		return false, err
	}
	ver, err := r.getJSON(ctx, SourceSpecKey(spec.Name), &api.SourceSpec{})
	if err != nil {
		return false, fmt.Errorf("put source %q: %w", spec.Name, err)
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return false, fmt.Errorf("put source %q: %w", spec.Name, err)
	}
	return ver == 0, nil
}

// CreateSourceSpec writes spec only when no source of that name exists, and
// reports whether it did.
func (r *Repo) CreateSourceSpec(ctx context.Context, spec api.SourceSpec) (bool, error) {
	spec.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceSpecKey(spec.Name), spec)
	if err != nil {
		return false, err
	}
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: op.Key, ExpectedVersion: 0}}, []store.Op{op}, nil)
	if err != nil {
		return false, fmt.Errorf("create source %q: %w", spec.Name, err)
	}
	return ok, nil
}

// GetSource returns a source's spec and status.
func (r *Repo) GetSource(ctx context.Context, name string) (*api.Source, error) {
	var s api.Source
	ver, err := r.getJSON(ctx, SourceSpecKey(name), &s.Spec)
	if err != nil {
		return nil, fmt.Errorf("get source %q: %w", name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("source %q: %w", name, ErrNotFound)
	}
	if _, err := r.getJSON(ctx, SourceStatusKey(name), &s.Status); err != nil {
		return nil, fmt.Errorf("get source status %q: %w", name, err)
	}
	return &s, nil
}

// ListSources returns every source sorted by name.
func (r *Repo) ListSources(ctx context.Context) ([]api.Source, error) {
	kvs, err := r.st.List(ctx, prefixSources)
	if err != nil {
		return nil, fmt.Errorf("list sources: %w", err)
	}
	byName := map[string]*api.Source{}
	var out []*api.Source
	for _, kv := range kvs {
		rest := strings.TrimPrefix(kv.Key, prefixSources)
		name, kind, ok := strings.Cut(rest, "/")
		if !ok {
			continue
		}
		s := byName[name]
		if s == nil {
			s = &api.Source{}
			byName[name] = s
			out = append(out, s)
		}
		var err error
		switch kind {
		case "spec":
			err = json.Unmarshal(kv.Value, &s.Spec)
		case "status":
			err = json.Unmarshal(kv.Value, &s.Status)
		}
		if err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
	}
	res := make([]api.Source, 0, len(out))
	for _, s := range out {
		if s.Spec.Name != "" { // a status without a spec is a leftover
			res = append(res, *s)
		}
	}
	return res, nil
}

// PutSourceStatus replaces a source's status.
func (r *Repo) PutSourceStatus(ctx context.Context, name string, st api.SourceStatus) error {
	st.UpdatedAt = r.now().UTC()
	op, err := putJSON(SourceStatusKey(name), st)
	if err != nil {
		return err
	}
	if err := r.st.Put(ctx, op.Key, op.Value); err != nil {
		return fmt.Errorf("put source status %q: %w", name, err)
	}
	return nil
}

// DeleteSource removes a source's spec and status. The workloads it manages
// stay, still owned by it, until another source or the API takes them over.
func (r *Repo) DeleteSource(ctx context.Context, name string) error {
	if _, err := r.st.Get(ctx, SourceSpecKey(name)); err != nil {
		return fmt.Errorf("source %q: %w", name, notFoundAs(err))
	}
	if err := r.st.Delete(ctx, SourceSpecKey(name)); err != nil {
		return fmt.Errorf("delete source %q: %w", name, err)
	}
	if err := r.st.Delete(ctx, SourceStatusKey(name)); err != nil {
		return fmt.Errorf("delete source status %q: %w", name, err)
	}
	return nil
}
