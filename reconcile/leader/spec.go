package leader

import (
	"sync"

	"github.com/robfig/cron/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile/leader/sched"
	"kat.dws.rip/kat/store/resources"
)

// spec is what the leader's loops need of a parsed workload: computed once
// per spec hash, never again while the hash is in use.
type spec struct {
	// TemplateHash is TemplateHash of the parsed workload: the spec
	// without its replica count.
	TemplateHash string
	// Desired is resources.DesiredInstances of the parsed workload.
	Desired int
	// Image is workload.kat's spec.source.image.
	Image string
	// Git is the app repository the workload is built from; nil for an
	// image workload.
	Git *quadlet.GitSource
	// Ports are the container ports of VirtualLoadBalancer.kat.
	Ports []int
	// TCPPorts are its TCP ports, by number; NamedTCPPorts by name.
	TCPPorts      map[int]bool
	NamedTCPPorts map[string]int
	// Ingress is its spec.ingress.
	Ingress []quadlet.Ingress
	// IngressProxy says its instances are the ingress proxy
	// (quadlet.LabelIngressProxy).
	IngressProxy bool
	// RestartPolicy is workload.kat's restartPolicy.condition.
	RestartPolicy string
	// Request is what each instance asks of the scheduler (Key and Count
	// left to the caller); RequestErr is why there is none, when the
	// resources do not parse.
	Request    sched.Request
	RequestErr error
	// Job is job.kat's spec, for a Job; Schedule is its parsed schedule,
	// nil when it has none.
	Job      *quadlet.JobSpec
	Schedule cron.Schedule
	// NodeByNode says a changed spec of this DaemonService is rolled out
	// node by node (updateStrategy Rolling), MaxParallel nodes at a time;
	// Verify that updateStrategy.verify is set.
	NodeByNode  bool
	MaxParallel int
	Verify      bool
	// Strategy is workload.kat's spec.updateStrategy; nil for a Job that
	// names none (its methods apply the defaults).
	Strategy *quadlet.UpdateStrategy
	// SecretEnv are the secret keys of the environment variables, and
	// SecretVolumes the secrets mounted as volumes (quadlet.SecretRefs).
	SecretEnv     []quadlet.SecretKeyRef
	SecretVolumes []string
}

// specOf extracts what the loops need of a parsed workload.
func specOf(q *quadlet.Quadlet) *spec {
	s := &spec{
		TemplateHash: TemplateHash(q), Desired: resources.DesiredInstances(q), Image: q.Workload.Spec.Source.Image,
		Git: q.Workload.Spec.Source.Git, RestartPolicy: q.Workload.Spec.RestartPolicy.Condition,
		Strategy:     q.Workload.Spec.UpdateStrategy,
		IngressProxy: q.Workload.Metadata.Labels[quadlet.LabelIngressProxy] != "",
	}
	s.Request, s.RequestErr = sched.NewRequest("", &q.Workload.Spec, 0)
	s.SecretEnv, s.SecretVolumes = q.Workload.Spec.SecretRefs()
	if q.Job != nil {
		j := q.Job.Spec
		s.Job = &j
		if j.Schedule != "" {
			s.Schedule, _ = quadlet.ParseSchedule(j.Schedule) // validated by the parse
		}
	}
	if u := q.Workload.Spec.UpdateStrategy; q.Workload.Spec.Type == quadlet.TypeDaemonService && u != nil && u.Type == quadlet.UpdateRolling {
		s.NodeByNode, s.MaxParallel, s.Verify = true, u.Rolling.NodesAtOnce(), u.Verify != nil
	}
	if q.LoadBalancer != nil {
		s.TCPPorts, s.NamedTCPPorts = map[int]bool{}, map[string]int{}
		for _, p := range q.LoadBalancer.Spec.Ports {
			s.Ports = append(s.Ports, p.ContainerPort)
			if p.Protocol == "TCP" {
				s.TCPPorts[p.ContainerPort] = true
				if p.Name != "" {
					s.NamedTCPPorts[p.Name] = p.ContainerPort
				}
			}
		}
		s.Ingress = q.LoadBalancer.Spec.Ingress
	}
	return s
}

// specCache holds the parsed spec of every spec hash in use, so that a pass
// never parses an unchanged workload again. It is safe for concurrent use.
type specCache struct {
	mu     sync.Mutex
	byHash map[string]*spec
	// parses counts the specs parsed and cached, for tests.
	parses int
}

func newSpecCache() *specCache { return &specCache{byHash: map[string]*spec{}} }

// get returns the parsed spec of files, whose meta says their hash is
// meta.SpecHash. It parses on a miss, and caches the result only when the
// files really hash to meta.SpecHash: a pass that catches a workload between
// its meta and its manifests (the watch delivers a transaction's keys one by
// one) gets nil and waits for the next pass.
func (c *specCache) get(meta api.WorkloadMeta, files map[string][]byte) *spec {
	// Parsing under the lock keeps two loops from parsing the same new
	// spec at once; parses are rare (a new spec hash) and short.
	c.mu.Lock()
	defer c.mu.Unlock()
	if s, ok := c.byHash[meta.SpecHash]; ok {
		return s
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{DefaultNamespace: meta.Namespace})
	if err != nil || q.SpecHash() != meta.SpecHash {
		return nil
	}
	s := specOf(q)
	c.byHash[meta.SpecHash] = s
	c.parses++
	return s
}

// keepOnly drops every spec whose hash is not in use.
func (c *specCache) keepOnly(inUse map[string]bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.byHash {
		if !inUse[h] {
			delete(c.byHash, h)
		}
	}
}

func (c *specCache) parseCount() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.parses
}
