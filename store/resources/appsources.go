package resources

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Key prefixes of app-repository state (docs/architecture.md "etcd keys").
const (
	prefixAppSources = "/kat/appsources/"
	prefixBuilds     = "/kat/builds/"
)

// AppSourceKey is where the leader keeps what it resolved the app repository
// of workload ns/name to.
func AppSourceKey(ns, name string) string { return prefixAppSources + ns + "/" + name }

// AppSourcesPrefix is the prefix of every AppSource.
func AppSourcesPrefix() string { return prefixAppSources }

// BuildRecordKey is where node puts its record of the build of commit of
// workload ns/name: /kat/builds/{ns}/{name}/{commit12}/{node}.
func BuildRecordKey(ns, name, commit, node string) string {
	return BuildRecordsPrefix(ns, name, commit) + node
}

// BuildRecordsPrefix is the prefix of every node's record of one build; with
// an empty commit, of every build of the workload.
func BuildRecordsPrefix(ns, name, commit string) string {
	if commit == "" {
		return prefixBuilds + ns + "/" + name + "/"
	}
	return prefixBuilds + ns + "/" + name + "/" + commit[:min(12, len(commit))] + "/"
}

// PutAppSource stores a.
func (r *Repo) PutAppSource(ctx context.Context, a api.AppSource) error {
	b, err := json.Marshal(a)
	if err != nil {
		return fmt.Errorf("encode app source %s/%s: %w", a.Namespace, a.Workload, err)
	}
	if err := r.st.Put(ctx, AppSourceKey(a.Namespace, a.Workload), b); err != nil {
		return fmt.Errorf("put app source %s/%s: %w", a.Namespace, a.Workload, err)
	}
	return nil
}

// DeleteAppSource removes the record of ns/name; a missing one is not an
// error.
func (r *Repo) DeleteAppSource(ctx context.Context, ns, name string) error {
	if err := r.st.Delete(ctx, AppSourceKey(ns, name)); err != nil && !errors.Is(err, store.ErrNotFound) {
		return fmt.Errorf("delete app source %s/%s: %w", ns, name, err)
	}
	return nil
}

// ListAppSources returns every AppSource, by "ns/name".
func (r *Repo) ListAppSources(ctx context.Context) (map[string]api.AppSource, error) {
	kvs, err := r.st.List(ctx, prefixAppSources)
	if err != nil {
		return nil, fmt.Errorf("list app sources: %w", err)
	}
	out := make(map[string]api.AppSource, len(kvs))
	for _, kv := range kvs {
		var a api.AppSource
		if err := json.Unmarshal(kv.Value, &a); err != nil {
			return nil, fmt.Errorf("decode %s: %w", kv.Key, err)
		}
		out[strings.TrimPrefix(kv.Key, prefixAppSources)] = a
	}
	return out, nil
}

// PutBuildRecordJSON stores a node's build record (api.Build, encoded by
// the caller) of commit of workload ns/name.
func (r *Repo) PutBuildRecordJSON(ctx context.Context, ns, name, commit, node string, record []byte) error {
	if err := r.st.Put(ctx, BuildRecordKey(ns, name, commit, node), record); err != nil {
		return fmt.Errorf("put build record of %s/%s at %s: %w", ns, name, commit[:min(12, len(commit))], err)
	}
	return nil
}

// ListBuildRecordsJSON returns the build records of workload ns/name (of one
// commit when commit is not empty), by key.
func (r *Repo) ListBuildRecordsJSON(ctx context.Context, ns, name, commit string) ([]store.KV, error) {
	kvs, err := r.st.List(ctx, BuildRecordsPrefix(ns, name, commit))
	if err != nil {
		return nil, fmt.Errorf("list build records of %s/%s: %w", ns, name, err)
	}
	return kvs, nil
}

// DefaultBuildRecordsKeep is how many commits' build records of a workload
// PruneBuildRecords keeps by default.
const DefaultBuildRecordsKeep = 10

// PruneBuildRecords keeps the build records of the newest keep commits of
// workload ns/name (by their startedAt) and deletes the others; keep 0
// deletes them all. It returns how many commits' records it deleted.
func (r *Repo) PruneBuildRecords(ctx context.Context, ns, name string, keep int) (int, error) {
	kvs, err := r.ListBuildRecordsJSON(ctx, ns, name, "")
	if err != nil {
		return 0, err
	}
	newest := map[string]time.Time{} // commit12 -> newest startedAt
	prefix := BuildRecordsPrefix(ns, name, "")
	for _, kv := range kvs {
		c12, _, ok := strings.Cut(strings.TrimPrefix(kv.Key, prefix), "/")
		if !ok {
			continue
		}
		var rec struct {
			StartedAt time.Time `json:"startedAt"`
		}
		_ = json.Unmarshal(kv.Value, &rec)
		if t, seen := newest[c12]; !seen || rec.StartedAt.After(t) {
			newest[c12] = rec.StartedAt
		}
	}
	commits := make([]string, 0, len(newest))
	for c := range newest {
		commits = append(commits, c)
	}
	sort.Slice(commits, func(i, j int) bool { return newest[commits[i]].After(newest[commits[j]]) })
	if len(commits) <= keep {
		return 0, nil
	}
	var ops []store.Op
	for _, c := range commits[keep:] {
		ops = append(ops, store.Op{Type: store.OpDeletePrefix, Key: prefix + c + "/"})
	}
	for len(ops) > 0 {
		n := min(len(ops), maxOpsPerTxn)
		if _, err := r.st.DoTransaction(ctx, nil, ops[:n], nil); err != nil {
			return 0, fmt.Errorf("prune build records of %s/%s: %w", ns, name, err)
		}
		ops = ops[n:]
	}
	return len(commits) - keep, nil
}
