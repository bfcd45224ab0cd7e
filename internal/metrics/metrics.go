package metrics

import (
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Results of a Git fetch or sync, a reconcile pass and a build.
const (
	ResultSuccess    = "success"
	ResultFailure    = "failure"
	ResultSuperseded = "superseded" // a sync stopped for a newer commit
	ResultBuilt      = "built"      // a build ran
	ResultCacheHit   = "cache_hit"  // the image came from the cache registry
	ResultExisting   = "existing"   // the image was on the node already
)

// Changes of this node's leadership (kat_leader_changes_total).
const (
	ChangeElected = "elected"
	ChangeLost    = "lost"
)

// registry is the process's registry of KAT's metrics.
var registry = prometheus.NewRegistry()

// Buckets of the duration histograms, in seconds.
var (
	passBuckets  = prometheus.DefBuckets // .005 s to 10 s
	gitBuckets   = []float64{.01, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300}
	buildBuckets = []float64{.1, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1200, 1800}
)

var (
	gitFetch = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_gitsync_fetch_duration_seconds",
		Help:    "Time to bring a Git source's repository to its branch head (a fetch; for a file:// source, reading the head in place), by source and result.",
		Buckets: gitBuckets,
	}, []string{"source", "result"})
	gitSync = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_gitsync_sync_duration_seconds",
		Help:    "Time of one sync round of a Git source (fetch, diff, apply to etcd), by source and result (success, failure, superseded).",
		Buckets: gitBuckets,
	}, []string{"source", "result"})

	webhooksReceived = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_webhooks_received_total",
		Help: "Webhook requests received, by provider (github, gitlab, gitea, generic, unknown).",
	}, []string{"provider"})
	webhooksAccepted = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_webhooks_accepted_total",
		Help: "Webhook requests answered 2xx, by provider and outcome (accepted: a push was dispatched; ping; ignored_event).",
	}, []string{"provider", "outcome"})
	webhooksRefused = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_webhooks_refused_total",
		Help: "Webhook requests refused, by provider and reason (bad_signature, missing_signature, rate_limited, no_matching_source, ...).",
	}, []string{"provider", "reason"})

	reconcilePass = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_reconcile_pass_duration_seconds",
		Help:    "Time of one pass of a reconcile loop (leader: placement, status, appsources; node: agent), by loop and result.",
		Buckets: passBuckets,
	}, []string{"loop", "result"})
	reconcileQueue = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kat_reconcile_queue_depth",
		Help: "Workloads waiting for a leader loop's pass: set when a pass starts (the workloads it takes) and when it ends (those changed meanwhile).",
	}, []string{"loop"})
	reconcileLatency = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_reconcile_latency_seconds",
		Help:    "Time from the first change a leader loop's pass acts on being seen to the end of that pass; loop=placement is the scheduling latency (a workload, node or instance change until the assignments are written).",
		Buckets: passBuckets,
	}, []string{"loop"})

	builds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_build_duration_seconds",
		Help:    "Time from a build request to its image on this node (waiting for a build slot included), by result (built, cache_hit, existing, failure).",
		Buckets: buildBuckets,
	}, []string{"result"})

	instances = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kat_instances",
		Help: "Instances assigned to a node, by node and phase (Pending, Running, Succeeded, Failed), as the node's agent sees them.",
	}, []string{"node", "phase"})

	isLeader = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kat_leader",
		Help: "1 while this node is the cluster's leader, else 0.",
	})
	leaderChanges = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_leader_changes_total",
		Help: "Changes of this node's leadership: elected (a term began) or lost (a term ended).",
	}, []string{"change"})

	apiRequests = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_api_request_duration_seconds",
		Help:    "Time to answer one request of the cluster API, by method, route pattern (\"/v1alpha1/n/{ns}/workloads/{name}\"; \"unmatched\" for none) and status code; _count counts requests.",
		Buckets: passBuckets,
	}, []string{"method", "route", "code"})

	scheduling = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_scheduling_attempts_total",
		Help: "Instances the leader tried to place, by result (scheduled, unschedulable) and, for unschedulable, the reason that ruled out the most nodes (insufficient_cpu, insufficient_memory, taint, no_gpu, ...; no_nodes when there is none).",
	}, []string{"result", "reason"})

	ingressRoutes = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kat_ingress_routes",
		Help: "Routes (host and path) the ingress proxy of a node routes, as its updater applied them last, by node.",
	}, []string{"node"})
	ingressBackends = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "kat_ingress_backends",
		Help: "Servers (a ready instance behind a route's workload and port) the ingress proxy of a node routes to, by node.",
	}, []string{"node"})
	ingressApply = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_ingress_apply_duration_seconds",
		Help:    "Time of one pass of a node's ingress updater that changed its proxy or failed (read the proxy's state, run the commands), by node and result (success, failure); _count counts them, so failure's is the apply errors.",
		Buckets: passBuckets,
	}, []string{"node", "result"})
	ingressReloads = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_ingress_reloads_total",
		Help: "Reloads of a node's ingress proxy (only to grow its pool of backends), by node and result (success; failure: the proxy kept its last good configuration).",
	}, []string{"node", "result"})

	backupDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "kat_backup_duration_seconds",
		Help:    "Time to write and check one etcd snapshot as leader (scheduled or katcall backup), by result (success, failure).",
		Buckets: gitBuckets,
	}, []string{"result"})
	backupLastSuccess = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kat_backup_last_success_timestamp_seconds",
		Help: "Unix time of the last etcd snapshot this node wrote and checked as leader; 0 before the first.",
	})
	backupSize = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kat_backup_size_bytes",
		Help: "Size of the last etcd snapshot this node wrote as leader.",
	})

	// The secrets' families count; no label names a secret or a key.
	secretsKnown = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "kat_secrets",
		Help: "Secrets in the cluster, as the leader's view holds them; 0 on a node that does not lead.",
	})
	secretDecrypts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_secret_decrypts_total",
		Help: "Secret files the leader decrypted, by where they came from (git, api) and result (success, failure: a file that does not decrypt or is no valid Secret).",
	}, []string{"via", "result"})
	secretDeliveries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_secret_deliveries_total",
		Help: "Answers of the leader's API to nodes asking for a secret's values, by result (delivered, forbidden: the node runs no instance using it, not_found, failure).",
	}, []string{"result"})
	secretFetches = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "kat_secret_fetches_total",
		Help: "Secrets this node's agent fetched from the leader for its instances, by result (success, failure).",
	}, []string{"result"})
)

// katCollectors are KAT's own families, each documented in the README.
var katCollectors = []prometheus.Collector{
	gitFetch, gitSync, webhooksReceived, webhooksAccepted, webhooksRefused,
	reconcilePass, reconcileQueue, reconcileLatency, builds, instances, isLeader, leaderChanges,
	etcd, backupDuration, backupLastSuccess, backupSize, usage, apiRequests, scheduling,
	ingressRoutes, ingressBackends, ingressApply, ingressReloads,
	secretsKnown, secretDecrypts, secretDeliveries, secretFetches,
}

func init() {
	registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	registry.MustRegister(katCollectors...)
	for _, c := range []string{ChangeElected, ChangeLost} {
		leaderChanges.WithLabelValues(c)
	}
}

// Registry returns the registry of KAT's metrics.
func Registry() *prometheus.Registry { return registry }

// Handler serves the registry in the Prometheus text format. A collector
// that fails does not hide the others' metrics.
func Handler() http.Handler { return handler() }

var handler = sync.OnceValue(func() http.Handler {
	return promhttp.HandlerFor(registry, promhttp.HandlerOpts{Registry: registry, ErrorHandling: promhttp.ContinueOnError})
})

// resultOf is ResultSuccess without err, ResultFailure with it.
func resultOf(err error) string {
	if err != nil {
		return ResultFailure
	}
	return ResultSuccess
}

// GitFetched records one fetch of source that began at start.
func GitFetched(source string, start time.Time, err error) {
	gitFetch.WithLabelValues(source, resultOf(err)).Observe(time.Since(start).Seconds())
}

// GitSynced records one sync round of source that began at start; result
// is ResultSuccess, ResultFailure or ResultSuperseded.
func GitSynced(source, result string, start time.Time) {
	gitSync.WithLabelValues(source, result).Observe(time.Since(start).Seconds())
}

// Webhook records one webhook request of provider that ended with outcome:
// a reason for refusing it when refused.
func Webhook(provider, outcome string, refused bool) {
	webhooksReceived.WithLabelValues(provider).Inc()
	if refused {
		webhooksRefused.WithLabelValues(provider, outcome).Inc()
	} else {
		webhooksAccepted.WithLabelValues(provider, outcome).Inc()
	}
}

// ReconcilePass records one pass of loop that began at start.
func ReconcilePass(loop string, start time.Time, err error) {
	reconcilePass.WithLabelValues(loop, resultOf(err)).Observe(time.Since(start).Seconds())
}

// QueueDepth sets how many workloads wait for loop's pass.
func QueueDepth(loop string, n int) {
	reconcileQueue.WithLabelValues(loop).Set(float64(n))
}

// ReconcileLatency records that loop's pass, which just ended, acted on a
// change first seen at seen. A zero seen (a pass no change asked for, such
// as a term's first) records nothing.
func ReconcileLatency(loop string, seen time.Time) {
	if seen.IsZero() {
		return
	}
	reconcileLatency.WithLabelValues(loop).Observe(time.Since(seen).Seconds())
}

// BuildFinished records one build request that took d and ended with
// result (ResultBuilt, ResultCacheHit, ResultExisting or ResultFailure).
func BuildFinished(result string, d time.Duration) {
	builds.WithLabelValues(result).Observe(d.Seconds())
}

// SetInstances sets node's instance counts by phase. Pass every phase,
// with 0 for those no instance is in, so none keeps a stale count.
func SetInstances(node string, byPhase map[string]int) {
	for phase, n := range byPhase {
		instances.WithLabelValues(node, phase).Set(float64(n))
	}
}

// LeaderChanged records that this node became the leader, or stopped
// being it.
func LeaderChanged(leading bool) {
	if leading {
		isLeader.Set(1)
		leaderChanges.WithLabelValues(ChangeElected).Inc()
		return
	}
	isLeader.Set(0)
	leaderChanges.WithLabelValues(ChangeLost).Inc()
}

// BackupFinished records one etcd snapshot that began at start: its size
// when it succeeded (err nil), its failure otherwise.
func BackupFinished(start time.Time, size int64, err error) {
	backupDuration.WithLabelValues(resultOf(err)).Observe(time.Since(start).Seconds())
	if err == nil {
		backupLastSuccess.Set(float64(time.Now().Unix()))
		backupSize.Set(float64(size))
	}
}

// APIRequest records one request of the cluster API: its method, the
// route pattern that matched it ("" for none), its status code and how
// long it took.
func APIRequest(method, route string, code int, d time.Duration) {
	if route == "" {
		route = "unmatched"
	}
	apiRequests.WithLabelValues(method, route, strconv.Itoa(code)).Observe(d.Seconds())
}

// Scheduling results (kat_scheduling_attempts_total).
const (
	ScheduleScheduled     = "scheduled"
	ScheduleUnschedulable = "unschedulable"
)

// Scheduled records n attempts to place an instance that ended with
// result (ScheduleScheduled, or ScheduleUnschedulable with the reason
// that ruled out the most nodes; "" for a scheduled one).
func Scheduled(result, reason string, n int) {
	scheduling.WithLabelValues(result, reason).Add(float64(n))
}

// IngressApplied records one pass of node's ingress updater that began at
// start and changed the proxy (or failed with err), and what the proxy
// routes after it: routes and backends.
func IngressApplied(node string, start time.Time, routes, backends int, err error) {
	ingressApply.WithLabelValues(node, resultOf(err)).Observe(time.Since(start).Seconds())
	if err == nil {
		ingressRoutes.WithLabelValues(node).Set(float64(routes))
		ingressBackends.WithLabelValues(node).Set(float64(backends))
	}
}

// IngressReloaded records one reload of node's ingress proxy; ok says it
// loaded the new configuration.
func IngressReloaded(node string, ok bool) {
	result := ResultSuccess
	if !ok {
		result = ResultFailure
	}
	ingressReloads.WithLabelValues(node, result).Inc()
}

// Values of kat_secret_decrypts_total's via label.
const (
	SecretViaGit = "git"
	SecretViaAPI = "api"
)

// Values of kat_secret_deliveries_total's result label.
const (
	DeliveryDelivered = "delivered"
	DeliveryForbidden = "forbidden"
	DeliveryNotFound  = "not_found"
)

// SetSecrets sets how many secrets the leader's view holds.
func SetSecrets(n int) { secretsKnown.Set(float64(n)) }

// SecretDecrypted records one secret file decrypted (and parsed) by the
// leader, from via (SecretViaGit, SecretViaAPI); err is its failure.
func SecretDecrypted(via string, err error) { secretDecrypts.WithLabelValues(via, resultOf(err)).Inc() }

// SecretDelivered records one answer to a node asking for a secret
// (DeliveryDelivered, DeliveryForbidden, DeliveryNotFound, ResultFailure).
func SecretDelivered(result string) { secretDeliveries.WithLabelValues(result).Inc() }

// SecretFetched records one fetch of a secret by this node's agent.
func SecretFetched(err error) { secretFetches.WithLabelValues(resultOf(err)).Inc() }
