package build

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/build/usernsrun"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/runtime"
)

// Config configures a Builder.
type Config struct {
	// Node is this node's name, written into every record. Required.
	Node string
	// WorkDir holds the temporary clones (WorkDir/src, emptied at New)
	// and the build logs (WorkDir/logs). Required.
	WorkDir string
	// Podman is the driver whose binary and storage builds use. Required.
	Podman *runtime.Podman
	// Records receives the build records. Default nil: records are only
	// returned.
	Records RecordStore
	// Timeout bounds one build (cache pull, clone, podman build and push),
	// counted from when it gets one of the MaxParallel slots.
	// Default 10 minutes.
	Timeout time.Duration
	// AuthFile is Podman's registry auth file (--authfile) for the cache
	// registry. Default "": Podman's own.
	AuthFile string
	// InsecureRegistries are registry hosts (host or host:port) reached
	// without TLS verification (--tls-verify=false), such as a registry on
	// loopback. Default none.
	InsecureRegistries []string
	// MaxParallel is how many builds of different commits run at once;
	// the others wait (in state Building). Default 2.
	MaxParallel int
	// Hold is how long what follows a build (the cache push, housekeeping)
	// waits for Release, so that it does not slow the start of the
	// container the build was for. Default DefaultHold.
	Hold time.Duration
	// KeepImages is how many kat-local images of a workload housekeeping
	// keeps (the newest). Default 3.
	KeepImages int
	// KeepLogs is how many build logs of a workload are kept (the newest).
	// Default 10.
	KeepLogs int
	// SubIDs is the sub-id range of user "containers" of /etc/subuid and
	// /etc/subgid (runtime.ReadSubIDRange). RUN steps run in a user
	// namespace from it: the slot of the workload (Request.UserNSSlot),
	// the map its containers get. Default nil: every build fails with
	// ErrNoSubIDs, as none may run RUN steps as host root.
	SubIDs *runtime.SubIDRange
	// Logger receives warnings the Builder handles itself (a record it
	// could not store). Default: none.
	Logger zerolog.Logger
	// Now is the clock. Default time.Now.
	Now func() time.Time
}

// Builder builds images of app-repository commits on one node. It is safe
// for concurrent use; Close stops the builds under way.
type Builder struct {
	cfg    Config
	pm     podman
	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	slots chan struct{} // one token per build under way (MaxParallel)

	mu      sync.Mutex
	flights map[string]*flight
	// held are the builds whose follow-up work (cache push,
	// housekeeping) waits for Release.
	held   map[string]chan struct{}
	closed bool

	pruneMu sync.Mutex
	builds  atomic.Int64 // podman builds started, for tests

	// wrapper is the script podman runs RUN steps through, helper the
	// link to this program it calls (usernsrun.Install); setup is the host
	// setup once found.
	wrapper string
	helper  string
	setupMu sync.Mutex
	setup   *hostSetup
}

// flight is one build under way; its waiters read rec and err after done
// is closed.
type flight struct {
	done chan struct{}
	rec  api.Build
	err  error
}

// New checks cfg, fills in its defaults, creates WorkDir and empties the
// clones a previous process left behind.
func New(cfg Config) (*Builder, error) {
	switch {
	case cfg.Node == "":
		return nil, errors.New("build: config: node is required")
	case cfg.WorkDir == "":
		return nil, errors.New("build: config: work dir is required")
	case cfg.Podman == nil:
		return nil, errors.New("build: config: podman driver is required")
	}
	if cfg.Timeout <= 0 {
		cfg.Timeout = 10 * time.Minute
	}
	if cfg.KeepImages <= 0 {
		cfg.KeepImages = 3
	}
	if cfg.KeepLogs <= 0 {
		cfg.KeepLogs = 10
	}
	if cfg.MaxParallel <= 0 {
		cfg.MaxParallel = 2
	}
	if cfg.Hold <= 0 {
		cfg.Hold = DefaultHold
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	src := filepath.Join(cfg.WorkDir, "src")
	if err := os.RemoveAll(src); err != nil {
		return nil, fmt.Errorf("build: remove old clones: %w", err)
	}
	for _, d := range []string{src, filepath.Join(cfg.WorkDir, "logs")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("build: create work dir: %w", err)
		}
	}
	wrapper, helper, err := usernsrun.Install(cfg.WorkDir)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	b := &Builder{
		cfg: cfg, pm: newPodman(cfg.Podman), ctx: ctx, cancel: cancel, wrapper: wrapper, helper: helper,
		flights: map[string]*flight{}, held: map[string]chan struct{}{}, slots: make(chan struct{}, cfg.MaxParallel),
	}
	if cfg.SubIDs != nil {
		// Find the host setup now, so that the first build does not
		// wait for it; a failure is found again by that build.
		b.wg.Go(func() { _, _ = b.hostSetup(b.ctx) })
	}
	return b, nil
}

// Close cancels the builds under way, waits for them to end (their
// records say Failed) and refuses new ones. It is safe to call twice.
func (b *Builder) Close() error {
	b.mu.Lock()
	b.closed = true
	b.mu.Unlock()
	b.cancel()
	b.wg.Wait()
	return nil
}

// Build returns the image of req's commit, building it when it is not on
// the node yet. Concurrent calls for the same namespace, workload and
// commit share one build; ctx bounds only this caller's wait. A failed
// build is a *FailedError; an invalid request an ErrInvalid.
func (b *Builder) Build(ctx context.Context, req Request) (api.Build, error) {
	if err := req.normalize(); err != nil {
		return api.Build{}, err
	}
	key := req.key()
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return api.Build{}, ErrClosed
	}
	f, ok := b.flights[key]
	if !ok {
		f = &flight{done: make(chan struct{})}
		b.flights[key] = f
		release := make(chan struct{})
		b.held[key] = release
		b.wg.Add(1)
		go func() {
			defer b.wg.Done()
			var after []func(context.Context)
			start := time.Now()
			f.rec, after, f.err = b.run(req)
			metrics.BuildFinished(buildResult(f.rec, f.err), time.Since(start))
			b.mu.Lock()
			delete(b.flights, key)
			b.mu.Unlock()
			close(f.done)
			// What the callers need not wait for (pushing to the cache,
			// dropping the cache's name, housekeeping) waits until they
			// started their container, so it never competes with that
			// start for Podman's storage.
			hold := time.NewTimer(b.cfg.Hold)
			select {
			case <-release:
			case <-hold.C:
			case <-b.ctx.Done():
			}
			hold.Stop()
			b.mu.Lock()
			delete(b.held, key)
			b.mu.Unlock()
			ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeout)
			defer cancel()
			for _, fn := range after {
				fn(ctx)
			}
			if f.err == nil && !f.rec.Existing {
				b.housekeeping(req.Namespace, req.Workload, req.Commit, f.rec.Image)
			}
		}()
	}
	b.mu.Unlock()
	select {
	case <-f.done:
		return f.rec, f.err
	case <-ctx.Done():
		return api.Build{}, fmt.Errorf("wait for build of %s/%s at %s: %w", req.Namespace, req.Workload, api.ShortCommit(req.Commit), ctx.Err())
	}
}

// Release tells the Builder that the image of a build (namespace, workload,
// full commit) is in use now: what follows the build (the cache push,
// housekeeping) may run. Without it, that work starts Config.Hold after the
// build. Releasing a build that holds nothing is a no-op.
func (b *Builder) Release(namespace, workload, commit string) {
	key := (&Request{Namespace: namespace, Workload: workload, Commit: strings.ToLower(commit)}).key()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ch, ok := b.held[key]; ok {
		close(ch)
		delete(b.held, key)
	}
}

// buildResult is the kat_build_duration_seconds result of a build.
func buildResult(rec api.Build, err error) string {
	switch {
	case err != nil:
		return metrics.ResultFailure
	case rec.Existing:
		return metrics.ResultExisting
	case rec.CacheHit:
		return metrics.ResultCacheHit
	}
	return metrics.ResultBuilt
}

// DefaultHold is Config.Hold's default.
const DefaultHold = 30 * time.Second

// run does one build, from the existing-image check to the final record.
// It also returns what is left to do once its callers have the image.
func (b *Builder) run(req Request) (api.Build, []func(context.Context), error) {
	rec := api.Build{
		Namespace: req.Namespace, Workload: req.Workload, Commit: req.Commit, Node: b.cfg.Node,
		Image: req.Image(), State: api.BuildBuilding, StartedAt: b.cfg.Now().UTC(),
	}
	// The clone starts at once, while the image's presence is checked
	// and a build slot awaited; it is thrown away when not needed.
	src, err := b.startSource(&req)
	if err != nil {
		return rec, nil, err
	}
	defer src.discard()
	if done, err := b.existing(&rec); done || err != nil {
		return rec, nil, err
	}
	select {
	case b.slots <- struct{}{}:
		defer func() { <-b.slots }()
	case <-b.ctx.Done():
		return rec, nil, ErrClosed
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeout)
	defer cancel()
	rec.StartedAt = b.cfg.Now().UTC()

	rec.LogPath = b.logPath(req.Namespace, req.Workload, req.Commit)
	if err := os.MkdirAll(filepath.Dir(rec.LogPath), 0o700); err != nil {
		return rec, nil, fmt.Errorf("create build log dir: %w", err)
	}
	file, err := os.Create(rec.LogPath)
	if err != nil {
		return rec, nil, fmt.Errorf("create build log: %w", err)
	}
	tl := &tail{}
	log := &lockedWriter{w: &stampWriter{w: io.MultiWriter(file, tl), start: time.Now(), lineStart: true}}
	fmt.Fprintf(log, "build %s/%s at %s on node %s, started %s\n", req.Namespace, req.Workload, req.Commit, b.cfg.Node, rec.StartedAt.Format(time.RFC3339))
	b.putRecord(rec)

	stage, after, err := b.produce(ctx, &req, &rec, log, src)
	rec.FinishedAt = b.cfg.Now().UTC()
	if err != nil {
		if ctx.Err() != nil && !errors.Is(err, ctx.Err()) {
			err = fmt.Errorf("%w: %w", ctx.Err(), err)
		}
		if errors.Is(err, context.DeadlineExceeded) {
			fmt.Fprintf(log, "build timed out after %s\n", b.cfg.Timeout)
		}
		fmt.Fprintf(log, "build failed at stage %s: %v\n", stage, err)
		rec.State, rec.Error, rec.LogTail = api.BuildFailed, err.Error(), tl.String()
		b.putRecord(rec)
		file.Close()
		return rec, nil, &FailedError{
			Namespace: req.Namespace, Workload: req.Workload, Commit: req.Commit,
			Stage: stage, LogTail: rec.LogTail, Err: err,
		}
	}
	fmt.Fprintf(log, "build succeeded: %s (%s) in %s, cache hit %t\n", rec.Image, rec.ImageID, rec.FinishedAt.Sub(rec.StartedAt).Round(time.Millisecond), rec.CacheHit)
	rec.State, rec.LogTail = api.BuildSucceeded, tl.String()
	b.putRecord(rec)
	final := rec
	// After the callers have the image: the cache's work, in the same log;
	// a failure is a warning on the record.
	finish := func(ctx context.Context) {
		defer file.Close()
		var warnings []string
		for _, fn := range after {
			if w := fn(ctx, log); w != "" {
				fmt.Fprintf(log, "warning: %s\n", w)
				warnings = append(warnings, w)
			}
		}
		if len(warnings) > 0 {
			final.Warnings = append(final.Warnings, warnings...)
			final.LogTail = tl.String()
			b.putRecord(final)
		}
	}
	return rec, []func(context.Context){finish}, nil
}

// existing reports whether rec's image is already on the node, and fills
// in rec when it is.
func (b *Builder) existing(rec *api.Build) (bool, error) {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	exists, err := b.cfg.Podman.ImageExists(ctx, rec.Image)
	if err != nil {
		return false, fmt.Errorf("build %s/%s at %s: %w", rec.Namespace, rec.Workload, api.ShortCommit(rec.Commit), err)
	}
	if !exists {
		return false, nil
	}
	rec.State, rec.Existing, rec.FinishedAt = api.BuildSucceeded, true, b.cfg.Now().UTC()
	rec.ImageID, _ = b.cfg.Podman.ImageID(ctx, rec.Image)
	return true, nil
}

// afterStep is work left once the image is handed over; it returns a
// warning, "" when it went well.
type afterStep func(ctx context.Context, log io.Writer) string

// produce makes the image: from the cache registry, else by cloning and
// building. The registry is asked first whether it has the image; when it
// cannot tell, the cache pull and the clone run at once (a miss costs no
// wait, a hit throws the clone away). What the callers need not wait for (the push
// to the cache, dropping the cache's name of a pulled image) is returned. It
// returns the stage that failed.
func (b *Builder) produce(ctx context.Context, req *Request, rec *api.Build, log io.Writer, src *source) (string, []afterStep, error) {
	reg := req.RegistryPath()
	cacheRef := ""
	var pulled chan cachePull
	var pullLog bytes.Buffer
	if reg != "" {
		cacheRef = reg + ":" + api.ShortCommit(req.Commit)
		// A look at the registry first: a miss then costs no pull, a
		// hit no clone.
		switch found, why := b.probeCache(ctx, cacheRef); found {
		case probeMissing:
			fmt.Fprintf(log, "cache miss: %s\n", why)
		case probePresent:
			if p := b.pullCache(ctx, cacheRef, log); p.ok {
				return b.useCache(ctx, cacheRef, p.id, rec, log)
			}
		default:
			// Let the pull tell, while the clone goes on.
			pulled = make(chan cachePull, 1)
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			go func() { pulled <- b.pullCache(pctx, cacheRef, &pullLog) }()
		}
	}
	// hit waits for the pull and copies its log in.
	hit := func() cachePull {
		if pulled == nil {
			return cachePull{}
		}
		p := <-pulled
		pulled = nil
		_, _ = log.Write(pullLog.Bytes())
		return p
	}

	src.wait(ctx)
	if p := hit(); p.ok {
		return b.useCache(ctx, cacheRef, p.id, rec, log)
	}
	_, _ = log.Write(src.log.Bytes())
	rec.Shallow = src.shallow
	if src.err != nil {
		return StageClone, nil, src.err
	}
	tmp := src.tmp
	contextDir, dockerfile, err := resolvePaths(filepath.Join(tmp, "src"), req.Spec.BuildContext, req.Spec.DockerfilePath)
	if err != nil {
		return StageContext, nil, err
	}
	ns, which, err := b.buildNS(ctx, req)
	if err != nil {
		return StageBuild, nil, err
	}
	fmt.Fprintln(log, ns.describe(which))
	b.builds.Add(1)
	iidFile := filepath.Join(tmp, "image-id")
	if err := b.pm.streamWith(ctx, log, ns.env(), ns.globalArgs(), buildArgs(req, rec.Image, dockerfile, contextDir, iidFile)...); err != nil {
		return StageBuild, nil, err
	}
	id, err := os.ReadFile(iidFile)
	if err != nil {
		return StageBuild, nil, fmt.Errorf("read the built image's ID: %w", err)
	}
	rec.ImageID = strings.TrimPrefix(strings.TrimSpace(string(id)), "sha256:")
	if cacheRef == "" {
		return "", nil, nil
	}
	image := rec.Image
	push := func(ctx context.Context, log io.Writer) string {
		args := append([]string{"push"}, registryArgs(cacheRef, b.cfg.AuthFile, b.cfg.InsecureRegistries)...)
		args = append(args, "--", image, "docker://"+cacheRef)
		if err := b.pm.stream(ctx, log, args...); err != nil {
			return fmt.Sprintf("push to cache %s: %v", cacheRef, err)
		}
		return ""
	}
	return "", []afterStep{push}, nil
}

// source is the checkout of a build's commit, made in the background from
// the start of the build.
type source struct {
	// tmp holds the repository (git) and the checkout (src).
	tmp    string
	cancel context.CancelFunc
	done   chan struct{}
	// Set once done is closed.
	shallow bool
	err     error
	log     bytes.Buffer
}

// startSource starts checking req's commit out in a directory of its own.
func (b *Builder) startSource(req *Request) (*source, error) {
	if err := os.MkdirAll(filepath.Join(b.cfg.WorkDir, "src"), 0o700); err != nil {
		return nil, fmt.Errorf("create clone dir: %w", err)
	}
	tmp, err := os.MkdirTemp(filepath.Join(b.cfg.WorkDir, "src"), req.Namespace+"_"+req.Workload+"-"+api.ShortCommit(req.Commit)+"-")
	if err != nil {
		return nil, fmt.Errorf("create clone dir: %w", err)
	}
	ctx, cancel := context.WithTimeout(b.ctx, b.cfg.Timeout)
	s := &source{tmp: tmp, cancel: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		s.shallow, s.err = checkout(ctx, req.Repository, req.Commit, req.Ref, req.Auth, filepath.Join(tmp, "git"), filepath.Join(tmp, "src"), &s.log)
	}()
	return s, nil
}

// wait waits for the checkout, or for ctx to end (s.err says so).
func (s *source) wait(ctx context.Context) {
	select {
	case <-s.done:
	case <-ctx.Done():
		s.cancel()
		<-s.done
	}
}

// discard stops the checkout if it still runs and removes its directory.
func (s *source) discard() {
	s.cancel()
	<-s.done
	_ = os.RemoveAll(s.tmp)
}

// useCache names the image pulled from the cache (its ID id) as the
// workload's, and leaves dropping the cache's name (so housekeeping sees one
// name) for after. Both go through the runtime's service: a podman process
// each would add its start to a cache hit.
func (b *Builder) useCache(ctx context.Context, cacheRef, id string, rec *api.Build, log io.Writer) (string, []afterStep, error) {
	if err := b.cfg.Podman.TagImage(ctx, cacheRef, rec.Image); err != nil {
		return StageBuild, nil, fmt.Errorf("cache hit, but tag it: %w", err)
	}
	rec.CacheHit = true
	fmt.Fprintf(log, "cache hit: %s\n", cacheRef)
	rec.ImageID = id
	untag := func(ctx context.Context, log io.Writer) string {
		if err := b.cfg.Podman.UntagImage(ctx, cacheRef); err != nil {
			return fmt.Sprintf("drop the cache's name %s: %v", cacheRef, err)
		}
		return ""
	}
	return StageBuild, []afterStep{untag}, nil
}

// cachePull is the outcome of a pull from the cache registry.
type cachePull struct {
	// ok is true when the image was pulled.
	ok bool
	// id is the pulled image's ID.
	id string
}

// pullCache tries to pull cacheRef from the cache registry, through the
// runtime's service (no podman process), with podman's progress in log.
func (b *Builder) pullCache(ctx context.Context, cacheRef string, log io.Writer) cachePull {
	opts := runtime.PullOptions{AuthFile: b.cfg.AuthFile, Progress: log}
	if slices.Contains(b.cfg.InsecureRegistries, registryHost(cacheRef)) {
		opts.TLSVerify = new(bool)
	}
	fmt.Fprintf(log, "pull %s (TLS verified: %t)\n", cacheRef, opts.TLSVerify == nil)
	id, err := b.cfg.Podman.PullImage(ctx, cacheRef, opts)
	if err != nil {
		fmt.Fprintf(log, "cache miss: %v\n", err)
		return cachePull{}
	}
	return cachePull{ok: true, id: id}
}

// housekeeping prunes the logs and images of a workload after a build,
// once its callers have their image. Failures are logged: the next build
// tries again.
func (b *Builder) housekeeping(namespace, workload, commit, image string) {
	ctx, cancel := context.WithTimeout(b.ctx, time.Minute)
	defer cancel()
	err := b.pruneLogs(namespace, workload, b.logPath(namespace, workload, commit))
	if _, perr := b.prune(ctx, namespace, workload, image); perr != nil {
		err = errors.Join(err, perr)
	}
	if err != nil {
		b.cfg.Logger.Warn().Err(err).Str("namespace", namespace).Str("workload", workload).Msg("build housekeeping")
	}
}

// putRecord stores rec; a failure is logged, not returned: the build's
// outcome does not depend on it and the next build writes again.
func (b *Builder) putRecord(rec api.Build) {
	if b.cfg.Records == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := b.cfg.Records.PutBuildRecord(ctx, rec); err != nil {
		b.cfg.Logger.Warn().Err(err).Str("namespace", rec.Namespace).Str("workload", rec.Workload).
			Str("commit", rec.Commit).Str("state", string(rec.State)).Msg("store build record")
	}
}

// resolvePaths finds the build context and Dockerfile in the checkout at
// root, following symbolic links, and refuses either when it leaves the
// repository.
func resolvePaths(root, buildContext, dockerfilePath string) (contextDir, dockerfile string, err error) {
	realRoot, err := filepath.EvalSymlinks(root)
	if err != nil {
		return "", "", fmt.Errorf("resolve checkout: %w", err)
	}
	contextDir, err = inside(realRoot, filepath.Join(realRoot, filepath.FromSlash(buildContext)), "spec.buildContext", buildContext)
	if err != nil {
		return "", "", err
	}
	if fi, err := os.Stat(contextDir); err != nil || !fi.IsDir() {
		return "", "", fmt.Errorf("%w: spec.buildContext %q is not a directory in the repository", ErrInvalid, buildContext)
	}
	dockerfile, err = inside(realRoot, filepath.Join(contextDir, filepath.FromSlash(dockerfilePath)), "spec.dockerfilePath", dockerfilePath)
	if err != nil {
		return "", "", err
	}
	if fi, err := os.Stat(dockerfile); err != nil || !fi.Mode().IsRegular() {
		return "", "", fmt.Errorf("%w: spec.dockerfilePath %q is not a file in the build context %q", ErrInvalid, dockerfilePath, buildContext)
	}
	return contextDir, dockerfile, nil
}

// inside resolves p's symbolic links and checks that it stays under root.
func inside(root, p, field, value string) (string, error) {
	resolved, err := filepath.EvalSymlinks(p)
	if errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("%w: %s %q does not exist in the repository", ErrInvalid, field, value)
	}
	if err != nil {
		return "", fmt.Errorf("%w: %s %q: %w", ErrInvalid, field, value, err)
	}
	rel, err := filepath.Rel(root, resolved)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("%w: %s %q leaves the repository (through a symbolic link)", ErrInvalid, field, value)
	}
	return resolved, nil
}
