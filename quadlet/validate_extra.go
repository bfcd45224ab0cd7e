package quadlet

import (
	"fmt"
	"path"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// cronReference is the time schedules are checked against. A fixed time
// keeps validation deterministic; robfig/cron looks five years ahead of it.
var cronReference = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

func validateLoadBalancer(c *checker, lb *VirtualLoadBalancer) {
	c.checkHeader(KindVirtualLoadBalancer)
	s := &lb.Spec
	if !c.required("spec") {
		return
	}
	if len(s.Ports) == 0 && !c.failed("spec.ports") {
		c.errorf("spec.ports", "must list at least one port")
	}
	names := map[string]bool{}
	type portKey struct {
		port  int
		proto string
	}
	seen := map[portKey]bool{}
	numbers := map[int]bool{}
	for i, port := range s.Ports {
		p := fmt.Sprintf("spec.ports[%d]", i)
		if port.Name != "" {
			c.check(p+".name", port.Name, dnsLabel)
			if names[port.Name] {
				c.errorf(p+".name", "port name %q is used more than once", port.Name)
			}
			names[port.Name] = true
		}
		if c.required(p+".containerPort") && portNumber(port.ContainerPort) != "" {
			c.errorf(p+".containerPort", "%s", portNumber(port.ContainerPort))
		}
		if c.oneOf(p+".protocol", port.Protocol, "TCP", "UDP") {
			k := portKey{port.ContainerPort, port.Protocol}
			if seen[k] {
				c.errorf(p+".containerPort", "port %d/%s is listed more than once", port.ContainerPort, port.Protocol)
			}
			seen[k] = true
		}
		numbers[port.ContainerPort] = true
	}
	if h := s.HealthCheck; h != nil {
		const p = "spec.healthCheck"
		if c.required(p+".exec") && len(h.Exec.Command) == 0 {
			c.errorf(p+".exec.command", "must name a command to run")
		}
		c.atLeast(p+".initialDelaySeconds", h.InitialDelaySeconds, 0)
		c.atLeast(p+".periodSeconds", h.PeriodSeconds, 1)
		c.atLeast(p+".timeoutSeconds", h.TimeoutSeconds, 1)
		c.atLeast(p+".successThreshold", h.SuccessThreshold, 1)
		c.atLeast(p+".failureThreshold", h.FailureThreshold, 1)
	}
	type route struct{ host, path string }
	routes := map[route]bool{}
	for i, in := range s.Ingress {
		p := fmt.Sprintf("spec.ingress[%d]", i)
		if c.required(p + ".host") {
			c.check(p+".host", in.Host, hostName)
		}
		if !strings.HasPrefix(in.Path, "/") {
			c.errorf(p+".path", "%q must start with \"/\"", in.Path)
		} else if strings.ContainsFunc(in.Path, func(r rune) bool { return r <= ' ' || r == 0x7f }) {
			c.errorf(p+".path", "%q must not contain spaces or control characters", in.Path)
		}
		r := route{in.Host, in.Path}
		if routes[r] {
			c.errorf(p, "host %q and path %q are listed more than once", in.Host, in.Path)
		}
		routes[r] = true
		if in.ServicePortName != "" && !names[in.ServicePortName] {
			c.errorf(p+".servicePortName", "port %q is not defined in spec.ports", in.ServicePortName)
		}
		if c.has(p+".servicePort") && !numbers[in.ServicePort] {
			c.errorf(p+".servicePort", "port %d is not defined in spec.ports", in.ServicePort)
		}
		if in.ServicePortName == "" && !c.has(p+".servicePort") && len(s.Ports) > 0 {
			c.errorf(p, "set servicePortName or servicePort to pick a port from spec.ports")
		}
	}
}

// MaxJobInstances bounds a JobDefinition's completions, parallelism and
// backoffLimit.
const MaxJobInstances = 1000

func validateJob(c *checker, j *JobDefinition) {
	c.checkHeader(KindJobDefinition)
	s := &j.Spec
	if s.Schedule != "" {
		c.check("spec.schedule", s.Schedule, cronSchedule)
	}
	// A run's record lists each of its instances, at most completions +
	// backoffLimit: MaxJobInstances bounds it far below etcd's limit on a
	// value (1.5 MiB).
	c.between("spec.completions", s.Completions, 1, MaxJobInstances)
	c.between("spec.parallelism", s.Parallelism, 1, MaxJobInstances)
	c.between("spec.backoffLimit", s.BackoffLimit, 0, MaxJobInstances)
	if c.has("spec.activeDeadlineSeconds") {
		c.atLeast("spec.activeDeadlineSeconds", s.ActiveDeadlineSeconds, 1)
	}
	if s.ConcurrencyPolicy != "" {
		c.oneOf("spec.concurrencyPolicy", s.ConcurrencyPolicy, ConcurrencyAllow, ConcurrencyForbid, ConcurrencyReplace)
	}
	if l := s.SuccessfulJobsHistoryLimit; l != nil {
		c.atLeast("spec.successfulJobsHistoryLimit", *l, 0)
	}
	if l := s.FailedJobsHistoryLimit; l != nil {
		c.atLeast("spec.failedJobsHistoryLimit", *l, 0)
	}
}

// ParseSchedule parses a job schedule as JobSpec.Schedule describes it. It
// refuses schedules that can never fire, such as "0 0 30 2 *".
func ParseSchedule(s string) (cron.Schedule, error) {
	sched, err := parseCron(s)
	if err != nil {
		return nil, fmt.Errorf("invalid schedule %q: %w", s, err)
	}
	if sched.Next(cronReference).IsZero() {
		return nil, fmt.Errorf("invalid schedule %q: can never fire", s)
	}
	return sched, nil
}

func parseCron(s string) (sched cron.Schedule, err error) {
	// robfig/cron v3.0.1 panics on a time zone prefix without a space
	// ("CRON_TZ=UTC"), among other hostile inputs.
	defer func() {
		if r := recover(); r != nil {
			sched, err = nil, fmt.Errorf("malformed schedule")
		}
	}()
	if strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		if !strings.Contains(s, " ") {
			return nil, fmt.Errorf("time zone prefix must be followed by a schedule")
		}
	}
	return cron.ParseStandard(s)
}

func cronSchedule(s string) string {
	if _, err := ParseSchedule(s); err != nil {
		return err.Error()
	}
	return ""
}

func validateBuild(c *checker, b *BuildDefinition) {
	c.checkHeader(KindBuildDefinition)
	s := &b.Spec
	c.check("spec.buildContext", s.BuildContext, insidePath)
	c.check("spec.dockerfilePath", s.DockerfilePath, func(p string) string {
		// The Dockerfile is relative to the context; both together must
		// stay inside the repository.
		if path.IsAbs(p) || insidePath(s.BuildContext+"/"+p) != "" {
			return insidePath(p)
		}
		return ""
	})
	for _, k := range sortedKeys(s.BuildArgs) {
		p := fmt.Sprintf("spec.buildArgs[%q]", k)
		c.check(p, k, mapKey)
		if strings.Contains(k, "=") {
			c.errorf(p, "key %q must not contain '='", k)
		}
	}
	if s.TargetStage != "" {
		c.check("spec.targetStage", s.TargetStage, noSpace)
	}
	if s.Platform != "" {
		c.check("spec.platform", s.Platform, platform)
	}
	if s.Cache != nil && s.Cache.RegistryPath != "" {
		c.check("spec.cache.registryPath", s.Cache.RegistryPath, noSpace)
	}
}
