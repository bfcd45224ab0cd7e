package quadlet

// Defaults of the Quadlet fields (docs/quadlet-reference.md lists them).
// Fields written explicitly are never overwritten: the checker tells
// present fields from absent ones, so that an explicit 0 is validated
// rather than replaced.
const (
	defaultMaxSurge             = 1
	defaultMaxRestarts          = 5
	defaultResetSeconds         = 3600
	defaultTolerationOperator   = "Exists"
	defaultProtocol             = "TCP"
	defaultPeriodSeconds        = 10
	defaultTimeoutSeconds       = 1
	defaultSuccessThreshold     = 1
	defaultFailureThreshold     = 3
	defaultIngressPath          = "/"
	defaultCompletions          = 1
	defaultParallelism          = 1
	defaultBackoffLimit         = 3
	defaultBuildContext         = "."
	defaultDockerfilePath       = "./Dockerfile"
	defaultGPUDriver            = "any"
	defaultInitialDelaySeconds  = 0
	defaultVerifyTimeoutSeconds = 30
)

func defaultWorkload(w *Workload, c *checker, namespace string) {
	if w.Metadata.Namespace == "" {
		w.Metadata.Namespace = namespace
	}
	s := &w.Spec
	if s.Type == TypeService || s.Type == TypeDaemonService {
		if s.UpdateStrategy == nil {
			s.UpdateStrategy = &UpdateStrategy{}
		}
	}
	if u := s.UpdateStrategy; u != nil {
		if u.Type == "" {
			u.Type = UpdateRolling
		}
		if u.Type == UpdateRolling {
			if u.Rolling == nil {
				u.Rolling = &RollingUpdate{}
			}
			if !c.has("spec.updateStrategy.rolling.maxSurge") {
				u.Rolling.MaxSurge = FromInt(defaultMaxSurge)
			}
		}
		if u.Verify != nil {
			setDefault(c, "spec.updateStrategy.verify.timeoutSeconds", &u.Verify.TimeoutSeconds, defaultVerifyTimeoutSeconds)
		}
		// Defaults written out are left out of the canonical form, so
		// writing them changes no spec hash.
		if d := u.ProgressDeadlineSeconds; d != nil && *d == DefaultProgressDeadlineSeconds {
			u.ProgressDeadlineSeconds = nil
		}
		if a := u.AutoRollback; a != nil && *a {
			u.AutoRollback = nil
		}
	}
	if r := &s.RestartPolicy; r.Condition == RestartMaxCount {
		if !c.has("spec.restartPolicy.maxRestarts") {
			r.MaxRestarts = defaultMaxRestarts
		}
		if !c.has("spec.restartPolicy.resetSeconds") {
			r.ResetSeconds = defaultResetSeconds
		}
	}
	for i := range s.Tolerations {
		if s.Tolerations[i].Operator == "" {
			s.Tolerations[i].Operator = defaultTolerationOperator
		}
	}
	// The default grace is left out of the canonical form, so writing it
	// out changes no spec hash.
	if g := s.Container.StopGracePeriodSeconds; g != nil && *g == DefaultStopGracePeriodSeconds {
		s.Container.StopGracePeriodSeconds = nil
	}
	res := &s.Container.Resources
	if res.Requests.CPU == "" {
		res.Requests.CPU = res.Limits.CPU
	}
	if res.Requests.Memory == "" {
		res.Requests.Memory = res.Limits.Memory
	}
	if res.GPU != nil && res.GPU.Driver == "" {
		res.GPU.Driver = defaultGPUDriver
	}
}

func defaultLoadBalancer(lb *VirtualLoadBalancer, c *checker) {
	s := &lb.Spec
	for i := range s.Ports {
		if s.Ports[i].Protocol == "" {
			s.Ports[i].Protocol = defaultProtocol
		}
	}
	if h := s.HealthCheck; h != nil {
		setDefault(c, "spec.healthCheck.initialDelaySeconds", &h.InitialDelaySeconds, defaultInitialDelaySeconds)
		setDefault(c, "spec.healthCheck.periodSeconds", &h.PeriodSeconds, defaultPeriodSeconds)
		setDefault(c, "spec.healthCheck.timeoutSeconds", &h.TimeoutSeconds, defaultTimeoutSeconds)
		setDefault(c, "spec.healthCheck.successThreshold", &h.SuccessThreshold, defaultSuccessThreshold)
		setDefault(c, "spec.healthCheck.failureThreshold", &h.FailureThreshold, defaultFailureThreshold)
	}
	for i := range s.Ingress {
		if s.Ingress[i].Path == "" {
			s.Ingress[i].Path = defaultIngressPath
		}
	}
}

func defaultJob(j *JobDefinition, c *checker) {
	setDefault(c, "spec.completions", &j.Spec.Completions, defaultCompletions)
	setDefault(c, "spec.parallelism", &j.Spec.Parallelism, defaultParallelism)
	setDefault(c, "spec.backoffLimit", &j.Spec.BackoffLimit, defaultBackoffLimit)
	// Fields KAT added to the spec are left out of the canonical form at
	// their defaults, so writing the default out changes no spec hash.
	s := &j.Spec
	if s.ConcurrencyPolicy == ConcurrencyForbid {
		s.ConcurrencyPolicy = ""
	}
	if l := s.SuccessfulJobsHistoryLimit; l != nil && *l == DefaultSuccessfulJobsHistoryLimit {
		s.SuccessfulJobsHistoryLimit = nil
	}
	if l := s.FailedJobsHistoryLimit; l != nil && *l == DefaultFailedJobsHistoryLimit {
		s.FailedJobsHistoryLimit = nil
	}
}

func defaultBuild(b *BuildDefinition) {
	if b.Spec.BuildContext == "" {
		b.Spec.BuildContext = defaultBuildContext
	}
	if b.Spec.DockerfilePath == "" {
		b.Spec.DockerfilePath = defaultDockerfilePath
	}
}

// setDefault sets *field to def unless the field at path was written.
func setDefault(c *checker, path string, field *int, def int) {
	if !c.has(path) {
		*field = def
	}
}
