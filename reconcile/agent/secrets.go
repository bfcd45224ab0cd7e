package agent

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sys/unix"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/internal/mountinfo"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// SecretSource fetches the values of a secret an instance of this node
// uses: from the leader's API, with the node's certificate (LeaderLink).
type SecretSource interface {
	NodeSecret(ctx context.Context, ns, name string) (*api.SecretDelivery, error)
}

// maxEnvValue is the longest value Linux takes in one environment variable
// (MAX_ARG_STRLEN - 1).
const maxEnvValue = 128<<10 - 1

// secretStore puts the secrets of the node's instances on a tmpfs the
// agent mounts at its directory, so no value reaches the node's disk:
// {dir}/{instanceID}/env/{VAR} and {dir}/{instanceID}/vol/{volume}/{key}.
type secretStore struct {
	dir    string
	source SecretSource
	// mount makes dir a tmpfs unless it is one; nil in tests that run
	// without the rights to mount.
	mount     func(dir string) error
	mountOnce sync.Once
	mountErr  error

	// versions are, by instance, the versions of the secrets it holds,
	// also kept in its directory (versionsFile) for the agent's next run.
	mu       sync.Mutex
	versions map[string]map[string]int64
}

// versionsFile is the file of an instance's directory that records the
// versions of the secrets it holds (names and numbers only).
const versionsFile = "versions.json"

// setVersions records that instance id holds the given versions (merged
// into what it held) and writes them to its directory.
func (s *secretStore) setVersions(id string, vs map[string]int64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := maps.Clone(s.loadVersionsLocked(id))
	if cur == nil {
		cur = map[string]int64{}
	}
	maps.Copy(cur, vs)
	if s.versions == nil {
		s.versions = map[string]map[string]int64{}
	}
	s.versions[id] = cur
	b, err := json.Marshal(cur)
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(s.dir, id, versionsFile), b)
}

// versionsOf returns the versions of the secrets instance id holds, nil
// when it holds none. Safe for concurrent use.
func (s *secretStore) versionsOf(id string) map[string]int64 {
	if s == nil || s.dir == "" {
		return nil
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return maps.Clone(s.loadVersionsLocked(id))
}

// loadVersionsLocked returns what is known of id's versions, reading its
// directory once after the agent started.
func (s *secretStore) loadVersionsLocked(id string) map[string]int64 {
	if vs, ok := s.versions[id]; ok {
		return vs
	}
	var vs map[string]int64
	if b, err := os.ReadFile(filepath.Join(s.dir, id, versionsFile)); err == nil {
		_ = json.Unmarshal(b, &vs)
	}
	if s.versions == nil {
		s.versions = map[string]map[string]int64{}
	}
	s.versions[id] = vs
	return vs
}

// SecretsTmpfs mounts a tmpfs at dir (mode 0700, not swapped where the
// kernel allows) unless one is mounted there: containers of a previous run
// of the agent still read from it.
func SecretsTmpfs(dir string) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fmt.Errorf("make the secrets directory: %w", err)
	}
	points, err := mountinfo.Below(dir)
	if err != nil {
		return fmt.Errorf("read the mounts: %w", err)
	}
	if slices.Contains(points, dir) {
		return nil
	}
	const flags = unix.MS_NOSUID | unix.MS_NODEV | unix.MS_NOEXEC
	if err := unix.Mount("tmpfs", dir, "tmpfs", flags, "size=64m,mode=0700,noswap"); err != nil {
		// Kernels before 6.4 know no noswap.
		if err2 := unix.Mount("tmpfs", dir, "tmpfs", flags, "size=64m,mode=0700"); err2 != nil {
			return fmt.Errorf("mount a tmpfs at %s for secrets: %w", dir, errors.Join(err, err2))
		}
	}
	return nil
}

// materialize fetches the secrets of a's workload and writes its env
// files and secret volumes, before its container is created. An error
// names the secret (or key), never a value.
func (s *secretStore) materialize(ctx context.Context, a api.Assignment, q *quadlet.Quadlet) error {
	names := q.Workload.Spec.SecretNames()
	if len(names) == 0 {
		return nil
	}
	if s == nil || s.source == nil || s.dir == "" {
		return errors.New("this agent cannot fetch secrets")
	}
	if s.mount != nil {
		s.mountOnce.Do(func() { s.mountErr = s.mount(s.dir) })
		if s.mountErr != nil {
			return s.mountErr
		}
	}
	got := map[string]*api.SecretDelivery{}
	for _, name := range names {
		d, err := s.fetch(ctx, a.Namespace, name)
		if err != nil {
			return fmt.Errorf("fetch secret %s/%s: %w", a.Namespace, name, err)
		}
		got[name] = d
	}
	dir := filepath.Join(s.dir, a.InstanceID)
	env := filepath.Join(dir, "env")
	if err := os.MkdirAll(env, 0o755); err != nil {
		return fmt.Errorf("secrets of %s: %w", a.InstanceID, err)
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		return fmt.Errorf("secrets of %s: %w", a.InstanceID, err)
	}
	spec := &q.Workload.Spec
	for _, e := range spec.Container.Env {
		if e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil {
			continue
		}
		ref := e.ValueFrom.SecretKeyRef
		v, ok := got[ref.Name].Values[ref.Key]
		switch {
		case !ok:
			return fmt.Errorf("secret %s/%s has no key %q", a.Namespace, ref.Name, ref.Key)
		case len(v) > maxEnvValue:
			return fmt.Errorf("secret %s/%s key %s is too large for an environment variable (%d bytes; the limit is %d): mount it as a file",
				a.Namespace, ref.Name, ref.Key, len(v), maxEnvValue)
		}
		if err := writeFileAtomic(filepath.Join(env, e.Name), v); err != nil {
			return fmt.Errorf("write variable %s: %w", e.Name, err)
		}
	}
	for _, vol := range spec.Volumes {
		if vol.Secret == nil {
			continue
		}
		if err := writeSecretVolume(filepath.Join(dir, "vol", vol.Name), got[vol.Secret.SecretName]); err != nil {
			return fmt.Errorf("write secret volume %s: %w", vol.Name, err)
		}
	}
	vs := make(map[string]int64, len(got))
	for name, d := range got {
		vs[name] = d.Version
	}
	if err := s.setVersions(a.InstanceID, vs); err != nil {
		return fmt.Errorf("secrets of %s: record their versions: %w", a.InstanceID, err)
	}
	return nil
}

// fetch asks the leader for the values of secret ns/name.
func (s *secretStore) fetch(ctx context.Context, ns, name string) (*api.SecretDelivery, error) {
	d, err := s.source.NodeSecret(ctx, ns, name)
	metrics.SecretFetched(err)
	return d, err
}

// writeSecretVolume writes d's values into dir as Kubernetes lays them
// out, so that a new version replaces them in place: the files of version
// N in ..vN, ..data a symbolic link to it (replaced by a rename), and each
// key a link to ..data/key. Files are 0444, directories 0555: readable by
// any user of the container, writable by none.
func writeSecretVolume(dir string, d *api.SecretDelivery) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	if err := os.Chmod(dir, 0o755); err != nil { // 0555 once written
		return err
	}
	ver := "..v" + strconv.FormatInt(d.Version, 10)
	vdir := filepath.Join(dir, ver)
	if err := os.RemoveAll(vdir); err != nil {
		return err
	}
	if err := os.Mkdir(vdir, 0o755); err != nil {
		return err
	}
	for k, v := range d.Values {
		if err := os.WriteFile(filepath.Join(vdir, k), v, 0o444); err != nil {
			return err
		}
		if err := os.Chmod(filepath.Join(vdir, k), 0o444); err != nil { // umask
			return err
		}
	}
	if err := os.Chmod(vdir, 0o555); err != nil {
		return err
	}
	tmp := filepath.Join(dir, "..data_tmp")
	_ = os.Remove(tmp)
	if err := os.Symlink(ver, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
		return err
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		return err
	}
	for _, e := range ents {
		name := e.Name()
		switch {
		case strings.HasPrefix(name, "..v") && name != ver:
			if err := os.Chmod(filepath.Join(dir, name), 0o755); err == nil {
				_ = os.RemoveAll(filepath.Join(dir, name))
			}
		case !strings.HasPrefix(name, ".."):
			if _, ok := d.Values[name]; !ok {
				_ = os.Remove(filepath.Join(dir, name))
			}
		}
	}
	for k := range d.Values {
		link := filepath.Join(dir, k)
		if _, err := os.Lstat(link); err == nil {
			continue
		}
		if err := os.Symlink(filepath.Join("..data", k), link); err != nil {
			return err
		}
	}
	return os.Chmod(dir, 0o555)
}

// writeFileAtomic writes b to path (mode 0444) through a rename.
func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	_ = os.Remove(tmp)
	if err := os.WriteFile(tmp, b, 0o444); err != nil {
		return err
	}
	if err := os.Chmod(tmp, 0o444); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// forget removes the secrets of instance id, once its container is gone.
func (s *secretStore) forget(id string) error {
	if s == nil || id == "" || strings.ContainsAny(id, "/") {
		return nil
	}
	s.mu.Lock()
	delete(s.versions, id)
	s.mu.Unlock()
	dir := filepath.Join(s.dir, id)
	// Read-only directories must be writable to be emptied.
	_ = filepath.WalkDir(dir, func(p string, e os.DirEntry, err error) error {
		if err == nil && e.IsDir() {
			_ = os.Chmod(p, 0o755)
		}
		return nil
	})
	return os.RemoveAll(dir)
}

// secretResync is how often the agent compares the secret volumes of its
// running instances with the node's secret references although none
// changed, retrying a failed fetch, and fetches the secrets that have no
// reference (a leader that writes none).
const secretResync = 30 * time.Second

// refreshSecretVolumes replaces, in place, the files of every secret
// volume of a running instance whose secret has a new version, until ctx
// ends. It watches the node's secret references, which the leader writes
// with every version (resources.NodeSecretRefsPrefix): a new version is
// fetched as soon as it is written. Environment variables are not touched:
// a new version of those is a new instance (the leader's template).
func (ag *Agent) refreshSecretVolumes(ctx context.Context) {
	refs := store.NewCache(ag.cfg.Repo.Store(), resources.NodeSecretRefsPrefix(ag.cfg.Node), func(kv store.KV) (api.SecretRef, bool) {
		r, err := resources.DecodeSecretRef(kv)
		return r, err == nil
	})
	changed := make(chan struct{}, 1)
	done := make(chan struct{})
	var stopped atomic.Bool // the watch ended: its references may be stale
	go func() {
		defer close(done)
		err := refs.Run(ctx, func(string) { reconcile.Poke(changed) })
		stopped.Store(true)
		if ctx.Err() == nil {
			ag.cfg.Logger.Error().Err(err).Str("component", "secrets").
				Msg("watching the node's secret references stopped: secret files are compared with the leader's every 30s only")
		}
	}()
	defer func() { <-done }()
	version := func(ns, name string) (int64, bool) {
		if stopped.Load() {
			return 0, false
		}
		r, ok := refs.Get(resources.SecretRefKey(ag.cfg.Node, ns, name))
		return r.Version, ok
	}
	t := time.NewTicker(secretResync)
	defer t.Stop()
	for {
		resync := false
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			resync = true
		case <-changed:
		}
		fetched := map[string]*api.SecretDelivery{} // one fetch per secret and pass
		for _, ai := range ag.table.withSecretVolumes() {
			if err := ag.secrets.refresh(ctx, ai.a, ai.q, version, resync, fetched); err != nil && ctx.Err() == nil {
				ag.cfg.Logger.Warn().Err(err).Str("instance", ai.a.InstanceID).Msg("update secret files")
			}
		}
	}
}

// refresh rewrites the secret volumes of instance a whose secret's version
// moved: version gives the node's reference of a secret. A volume whose
// reference names the version it holds is left alone; one whose secret
// has no reference is fetched on a resync only. fetched caches the
// answers of one pass.
func (s *secretStore) refresh(ctx context.Context, a api.Assignment, q *quadlet.Quadlet, version func(ns, name string) (int64, bool),
	resync bool, fetched map[string]*api.SecretDelivery) error {
	if s == nil || s.source == nil || s.dir == "" {
		return nil
	}
	env, _ := q.Workload.Spec.SecretRefs()
	for _, vol := range q.Workload.Spec.Volumes {
		if vol.Secret == nil {
			continue
		}
		dir := filepath.Join(s.dir, a.InstanceID, "vol", vol.Name)
		cur, err := os.Readlink(filepath.Join(dir, "..data"))
		if err != nil {
			continue // not written yet: create does it
		}
		v, ok := version(a.Namespace, vol.Secret.SecretName)
		if (ok && cur == "..v"+strconv.FormatInt(v, 10)) || (!ok && !resync) {
			continue
		}
		key := a.Namespace + "/" + vol.Secret.SecretName
		d, ok := fetched[key]
		if !ok {
			var err error
			if d, err = s.fetch(ctx, a.Namespace, vol.Secret.SecretName); err != nil {
				return fmt.Errorf("fetch secret %s: %w", key, err)
			}
			fetched[key] = d
		}
		if cur == "..v"+strconv.FormatInt(d.Version, 10) {
			continue // up to date: the reference was ahead of the fetch's answer, or there is none
		}
		if err := writeSecretVolume(dir, d); err != nil {
			return fmt.Errorf("write secret volume %s: %w", vol.Name, err)
		}
		if !slices.ContainsFunc(env, func(r quadlet.SecretKeyRef) bool { return r.Name == vol.Secret.SecretName }) {
			// A variable keeps the version of its container's start.
			if err := s.setVersions(a.InstanceID, map[string]int64{vol.Secret.SecretName: d.Version}); err != nil {
				return fmt.Errorf("secrets of %s: record their versions: %w", a.InstanceID, err)
			}
		}
	}
	return nil
}
