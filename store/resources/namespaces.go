package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Namespaces that always exist: created at init and never deleted.
const (
	NamespaceDefault = "default"
	NamespaceSystem  = "kat-core"
)

// IsProtectedNamespace reports whether a namespace may not be deleted.
func IsProtectedNamespace(name string) bool {
	return name == NamespaceDefault || name == NamespaceSystem
}

// EnsureNamespace creates the namespace when it does not exist and reports
// whether it did so. An existing namespace is left as it is.
func (r *Repo) EnsureNamespace(ctx context.Context, name string, labels map[string]string) (bool, error) {
	_, created, err := r.putNamespace(ctx, name, labels, false)
	return created, err
}

// PutNamespace creates a namespace or replaces its labels, reporting whether it
// was created.
func (r *Repo) PutNamespace(ctx context.Context, name string, labels map[string]string) (*api.Namespace, bool, error) {
	return r.putNamespace(ctx, name, labels, true)
}

// CreateNamespace creates a namespace, failing with ErrAlreadyExists when it
// exists.
func (r *Repo) CreateNamespace(ctx context.Context, name string, labels map[string]string) (*api.Namespace, error) {
	rec := api.Namespace{Name: name, UID: r.newUID(), Labels: labels, CreatedAt: r.now().UTC()}
	op, err := putJSON(NamespaceKey(name), rec)
	if err != nil {
		return nil, err
	}
	ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: NamespaceKey(name), ExpectedVersion: 0}}, []store.Op{op}, nil)
	if err != nil {
		return nil, fmt.Errorf("create namespace %q: %w", name, err)
	}
	if !ok {
		return nil, fmt.Errorf("namespace %q: %w", name, ErrAlreadyExists)
	}
	return &rec, nil
}

func (r *Repo) putNamespace(ctx context.Context, name string, labels map[string]string, replace bool) (*api.Namespace, bool, error) {
	for range maxTxnAttempts {
		var cur api.Namespace
		ver, err := r.getJSON(ctx, NamespaceKey(name), &cur)
		if err != nil {
			return nil, false, fmt.Errorf("put namespace %q: %w", name, err)
		}
		if ver != 0 && (!replace || maps.Equal(cur.Labels, labels)) {
			return &cur, false, nil
		}
		rec := cur
		if ver == 0 {
			rec = api.Namespace{Name: name, UID: r.newUID(), CreatedAt: r.now().UTC()}
		}
		rec.Labels = labels
		op, err := putJSON(NamespaceKey(name), rec)
		if err != nil {
			return nil, false, err
		}
		ok, err := r.st.DoTransaction(ctx, []store.Compare{{Key: NamespaceKey(name), ExpectedVersion: ver}}, []store.Op{op}, nil)
		if err != nil {
			return nil, false, fmt.Errorf("put namespace %q: %w", name, err)
		}
		if ok {
			return &rec, ver == 0, nil
		}
	}
	return nil, false, fmt.Errorf("put namespace %q: %w", name, ErrConflict)
}

// GetNamespace returns one namespace.
func (r *Repo) GetNamespace(ctx context.Context, name string) (*api.Namespace, error) {
	var ns api.Namespace
	ver, err := r.getJSON(ctx, NamespaceKey(name), &ns)
	if err != nil {
		return nil, fmt.Errorf("get namespace %q: %w", name, err)
	}
	if ver == 0 {
		return nil, fmt.Errorf("namespace %q: %w", name, ErrNotFound)
	}
	return &ns, nil
}

// ListNamespaces returns all namespaces sorted by name.
func (r *Repo) ListNamespaces(ctx context.Context) ([]api.Namespace, error) {
	kvs, err := r.st.List(ctx, prefixNamespaces)
	if err != nil {
		return nil, fmt.Errorf("list namespaces: %w", err)
	}
	out := make([]api.Namespace, 0, len(kvs))
	for _, kv := range kvs {
		var ns api.Namespace
		if err := json.Unmarshal(kv.Value, &ns); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out = append(out, ns)
	}
	return out, nil
}

// DeleteNamespace deletes an empty, unprotected namespace.
func (r *Repo) DeleteNamespace(ctx context.Context, name string) error {
	if IsProtectedNamespace(name) {
		return fmt.Errorf("delete namespace %q: %w: it is created by KAT and always exists", name, ErrProtected)
	}
	kv, err := r.st.Get(ctx, NamespaceKey(name))
	if err != nil {
		return fmt.Errorf("namespace %q: %w", name, notFoundAs(err))
	}
	workloads, err := r.ListWorkloads(ctx, name)
	if err != nil {
		return err
	}
	if len(workloads) > 0 {
		return fmt.Errorf("delete namespace %q: %w: it holds %d workload(s), delete them first", name, ErrNamespaceNotEmpty, len(workloads))
	}
	// The prefix compare makes "still empty" part of the transaction: a
	// workload created after the listing makes it fail rather than be
	// orphaned, and an apply racing the delete fails on the namespace compare.
	ok, err := r.st.DoTransaction(ctx, []store.Compare{
		{Key: NamespaceKey(name), ExpectedVersion: kv.Version},
		{Key: prefixDesired + name + "/", Prefix: true},
	}, []store.Op{{Type: store.OpDelete, Key: NamespaceKey(name)}}, nil)
	if err != nil {
		return fmt.Errorf("delete namespace %q: %w", name, err)
	}
	if !ok {
		return fmt.Errorf("delete namespace %q: %w: it changed while being deleted, try again", name, ErrConflict)
	}
	return nil
}
