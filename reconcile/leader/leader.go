package leader

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// DefaultResync is Config.Resync's default.
const DefaultResync = 30 * time.Second

// DefaultDrainDelay is kat-agent's default for Config.DrainDelay.
const DefaultDrainDelay = 2 * time.Second

// Config holds the dependencies of a term's leader loops.
type Config struct {
	// Repo is the cluster state. Required.
	Repo *resources.Repo
	// NodeLossTimeout is how old a node's last heartbeat may be before the
	// node is NotReady and its instances are replaced (cluster.kat's
	// nodeLossTimeoutSeconds). Default quadlet.DefaultNodeLossTimeoutSeconds.
	NodeLossTimeout time.Duration
	// AppInterval is how often app repositories are resolved again without
	// a webhook. Default quadlet.DefaultPollIntervalSeconds.
	AppInterval time.Duration
	// AppAuth names the app repositories' credential files. Default none.
	AppAuth api.GitAuth
	// HeldSlots are user-namespace slots no workload gets, though no
	// assignment holds them: a detached node's control plane holds those
	// of the cluster's Job instances it leaves running. Default none.
	HeldSlots []int
	// Resolve resolves an app repository's ref; default gitx.ResolveAppRef
	// with AppAuth. Tests replace it.
	Resolve func(ctx context.Context, g quadlet.GitSource) (string, error)
	// Resync is the period of a pass over every workload, changed or not.
	// Default DefaultResync.
	Resync time.Duration
	// Desired is the term's index of the desired state, shared with the Git
	// sources; the caller runs it. Default: the view makes and runs its own.
	Desired *resources.DesiredIndex
	// DaemonNodeDeadline is how long one node of a DaemonService's
	// node-by-node update may take to be verified before it fails.
	// Default DefaultDaemonNodeDeadline.
	DaemonNodeDeadline time.Duration
	// ClusterDomain is cluster.kat's clusterDomain, under which the
	// records loop writes DNS records. Default quadlet.DefaultClusterDomain.
	ClusterDomain string
	// DrainDelay is how long an instance about to stop stays out of every
	// list of ready instances (workload status, DNS) before its assignment
	// is deleted and its agent stops it, so clients following the lists
	// see no failed request. 0 stops instances at once; kat-agent's
	// --drain-delay defaults to DefaultDrainDelay.
	DrainDelay time.Duration
	// CollectAfter is how long a node may stay NotReady before the leader
	// deletes it (cluster.kat's nodeCollectAfterSeconds), with CollectNode,
	// which deletes it with everything it held. 0 or a nil CollectNode:
	// never.
	CollectAfter time.Duration
	CollectNode  func(ctx context.Context, name string) error
	// Replace is the back-off between replacements of a workload's failed
	// instances; zero fields take the defaults (DefaultReplaceBase, ...).
	Replace ReplacePolicy
	// Sealer seals the keys of ingress certificates and of the ACME
	// account (the cluster CA). Nil: no certificates are imported or
	// issued.
	Sealer resources.Sealer
	// IngressCertDir is the directory of certificate pairs NAME.crt and
	// NAME.key that spec.ingress[].tlsCertificate names; "" imports none.
	// It is watched; CertResync is how often it is read again anyway.
	// Default DefaultCertResync.
	IngressCertDir string
	CertResync     time.Duration
	// certWatchSynced, when set (by tests), is the certificate
	// directory's filewatch.Config.Synced.
	certWatchSynced func(complete bool)
	// ACME, when its Directory is set, issues and renews the certificates
	// of the hosts whose rules have tls without tlsCertificate.
	ACME ACMEConfig
	// Now and NewSuffix replace time.Now and RandomSuffix, for tests.
	Now       func() time.Time
	NewSuffix func() string
	Logger    zerolog.Logger
}

// Leader is one term's leader loops over one view of the cluster state:
// placement, workload status and app sources. Make a new one for every term
// (reconcile.Leadership does, through the node's Term), so every term starts
// from etcd.
type Leader struct {
	cfg     Config
	view    *view
	apps    *AppSources
	dns     *dnsRecords
	ingress *ingressRoutes
	refs    *secretRefs
	// passes counts the passes of each loop, and planned and derived the
	// workloads placement planned and statuses the status loop derived, for
	// tests and benchmarks.
	placementPasses, statusPasses atomic.Int64
	planned, derived              atomic.Int64
	// lossScans counts the node-loss clock's looks at every node.
	lossScans atomic.Int64
	// busy counts the passes under way and subs are the subscriptions of
	// the loops that make them, for tests that wait for quiet (idle).
	busy atomic.Int64
	subs []*subscription
	// rng breaks the scheduler's ties; only the placement loop uses it.
	rng *rand.Rand
}

// New checks cfg, fills in its defaults and returns the loops of one term.
func New(cfg Config) (*Leader, error) {
	if cfg.Repo == nil {
		return nil, errors.New("leader: repo is required")
	}
	if cfg.NodeLossTimeout <= 0 {
		cfg.NodeLossTimeout = quadlet.DefaultNodeLossTimeoutSeconds * time.Second
	}
	if cfg.Resync <= 0 {
		cfg.Resync = DefaultResync
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.ClusterDomain == "" {
		cfg.ClusterDomain = quadlet.DefaultClusterDomain
	}
	if cfg.NewSuffix == nil {
		cfg.NewSuffix = RandomSuffix
	}
	if cfg.CertResync <= 0 {
		cfg.CertResync = DefaultCertResync
	}
	l := &Leader{
		cfg:  cfg,
		view: newView(cfg.Repo.Store(), cfg.Desired, cfg.NodeLossTimeout, cfg.Now),
		rng:  rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())), //nolint:gosec // tie-breaking, not secrecy
		apps: NewAppSources(AppSourcesConfig{
			Repo: cfg.Repo, Interval: cfg.AppInterval, Auth: cfg.AppAuth, Resolve: cfg.Resolve, Now: cfg.Now,
			Logger: cfg.Logger.With().Str("component", "appsources").Logger(),
		}),
	}
	l.dns = newDNSRecords(l)
	l.ingress = newIngressRoutes(l)
	l.refs = newSecretRefs(l)
	return l, nil
}

// AppSources is the app-repository loop, a webhook.Dispatcher for pushes to
// app repositories.
func (l *Leader) AppSources() *AppSources { return l.apps }

// Loops returns the term's loops: the view that follows etcd, placement,
// the node-loss clock, status, app sources, DNS records, ingress routes and
// the nodes' secret references.
func (l *Leader) Loops() []reconcile.Loop {
	placement := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources, factNodes, factTimers, factJobs)
	// The status loop is the statuses' only writer: their changes are its
	// own, and it waits for them after each pass instead.
	status := l.view.subscribe(factDesired, factAssignments, factInstances, factAppSources, factBuilds, factSources,
		factScheduling, factNodes, factRollouts, factJobs, factTimers, factIngress)
	apps := l.view.subscribe(factDesired)
	// The records loop is the records' only writer, like the status loop.
	dns := l.view.subscribe(factAssignments, factInstances, factNodes)
	ingress := l.view.subscribe(factDesired, factAssignments, factInstances, factNodes, factCertificates)
	// A secret's change marks every workload desired-dirty.
	refs := l.view.subscribe(factDesired, factAssignments)
	l.subs = []*subscription{placement, status}
	loops := []reconcile.Loop{
		{Name: "view", Run: l.view.run},
		{Name: "placement", Run: func(ctx context.Context) error {
			return l.loop(ctx, placement, "placement", l.placeTracked)
		}},
		{Name: "nodeloss", Run: l.nodeLossClock},
		{Name: "rolloutclock", Run: l.wakeClock},
		{Name: "status", Run: func(ctx context.Context) error {
			return l.loop(ctx, status, "status", l.statusOnce)
		}},
		{Name: "appsources", Run: func(ctx context.Context) error { return l.apps.run(ctx, l.view, apps) }},
		{Name: "dns", Run: func(ctx context.Context) error { return l.dns.run(ctx, dns) }},
		{Name: "ingress", Run: func(ctx context.Context) error { return l.ingress.run(ctx, ingress) }},
		{Name: "secretrefs", Run: func(ctx context.Context) error { return l.refs.run(ctx, refs) }},
	}
	if l.cfg.Sealer != nil && l.cfg.IngressCertDir != "" {
		certs := l.view.subscribe(factIngress)
		loops = append(loops, reconcile.Loop{Name: "ingress-certs", Run: func(ctx context.Context) error { return l.certFiles(ctx, certs) }})
	}
	if l.cfg.Sealer != nil && l.cfg.ACME.Directory != "" {
		acme := l.view.subscribe(factIngress, factCertificates)
		loops = append(loops, reconcile.Loop{Name: "acme", Run: func(ctx context.Context) error { return l.acmeLoop(ctx, acme) }})
	}
	return loops
}

// TermStart is when this leader's term began, as its placement counts
// heartbeats from it (resources.HeartbeatInTerm).
func (l *Leader) TermStart() time.Time { return l.view.termStart }

// WorkloadInstances returns the assignments of workload ns/name, sorted by
// key and without their files, with the latest report of each instance a
// node reported, by instance ID, as the leader's watch-fed view holds them;
// false until the view has its first listing of both. The values are
// shared with the view: do not modify them.
func (l *Leader) WorkloadInstances(ns, name string) ([]api.Assignment, map[string]api.InstanceStatus, bool) {
	for _, ch := range []<-chan struct{}{l.view.assigns.Synced(), l.view.nodes.Synced()} {
		select {
		case <-ch:
		default:
			return nil, nil, false
		}
	}
	as := l.view.assignmentsOf(ns + "/" + name)
	for i := range as {
		as[i].Files = nil
	}
	return as, l.view.reportsOf(as), true
}

// IsMemberAddress reports whether a is the advertised address of a
// registered etcd member (which forwards API requests to the leader); false
// until the leader's view has synced.
func (l *Leader) IsMemberAddress(a netip.Addr) bool { return l.view.memberAddress(a) }
