package quadlet

import (
	"fmt"
	"strings"
	"time"

	"github.com/robfig/cron/v3"
)

// JobDefinition is the job file of a workload of type Job
// (conventionally job.kat).
type JobDefinition struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindJobDefinition.
	Kind string `json:"kind" yaml:"kind"`
	// Spec may be left out to take every default.
	Spec JobSpec `json:"spec" yaml:"spec"`
}

// JobSpec says when and how often a job runs.
type JobSpec struct {
	// Schedule is a cron schedule: five fields or a descriptor such as
	// "@hourly", optionally prefixed with "CRON_TZ=Area/City ". Times without
	// CRON_TZ are in the leader's local time zone. Default none: the job runs
	// once.
	Schedule string `json:"schedule,omitempty" yaml:"schedule,omitempty"`
	// Completions is the number of instances of a run that must exit 0 (1
	// to MaxJobInstances). Default 1.
	Completions int `json:"completions" yaml:"completions"`
	// Parallelism is the most instances running at once (1 to
	// MaxJobInstances). Default 1.
	Parallelism int `json:"parallelism" yaml:"parallelism"`
	// ActiveDeadlineSeconds bounds one run of the job (> 0). Default none.
	ActiveDeadlineSeconds int `json:"activeDeadlineSeconds,omitempty" yaml:"activeDeadlineSeconds,omitempty"`
	// BackoffLimit is the number of failed instances a run retries with a
	// new instance (0 to MaxJobInstances): a run makes at most Completions
	// + BackoffLimit instances and fails at failure BackoffLimit + 1.
	// Default 3.
	BackoffLimit int `json:"backoffLimit" yaml:"backoffLimit"`
	// ConcurrencyPolicy says what a scheduled firing does while an earlier
	// run is still active: ConcurrencyAllow starts another run,
	// ConcurrencyForbid skips the firing, ConcurrencyReplace stops the
	// active runs and starts a new one. Default ConcurrencyForbid, left out
	// of the canonical form.
	ConcurrencyPolicy string `json:"concurrencyPolicy,omitempty" yaml:"concurrencyPolicy,omitempty"`
	// SuccessfulJobsHistoryLimit is how many succeeded runs are kept, with
	// their finished containers (>= 0). Default 3
	// (DefaultSuccessfulJobsHistoryLimit), left out of the canonical form.
	SuccessfulJobsHistoryLimit *int `json:"successfulJobsHistoryLimit,omitempty" yaml:"successfulJobsHistoryLimit,omitempty"`
	// FailedJobsHistoryLimit is how many failed runs are kept, with their
	// finished containers (>= 0). Default 1 (DefaultFailedJobsHistoryLimit),
	// left out of the canonical form.
	FailedJobsHistoryLimit *int `json:"failedJobsHistoryLimit,omitempty" yaml:"failedJobsHistoryLimit,omitempty"`
}

// Concurrency policies of a scheduled Job (JobSpec.ConcurrencyPolicy).
const (
	ConcurrencyAllow   = "Allow"
	ConcurrencyForbid  = "Forbid"
	ConcurrencyReplace = "Replace"
)

// Defaults of JobSpec's history limits.
const (
	DefaultSuccessfulJobsHistoryLimit = 3
	DefaultFailedJobsHistoryLimit     = 1
)

// Concurrency is the job's concurrency policy, its default applied.
func (s JobSpec) Concurrency() string {
	if s.ConcurrencyPolicy == "" {
		return ConcurrencyForbid
	}
	return s.ConcurrencyPolicy
}

// SuccessfulHistory is SuccessfulJobsHistoryLimit, its default applied.
func (s JobSpec) SuccessfulHistory() int {
	if s.SuccessfulJobsHistoryLimit == nil {
		return DefaultSuccessfulJobsHistoryLimit
	}
	return *s.SuccessfulJobsHistoryLimit
}

// FailedHistory is FailedJobsHistoryLimit, its default applied.
func (s JobSpec) FailedHistory() int {
	if s.FailedJobsHistoryLimit == nil {
		return DefaultFailedJobsHistoryLimit
	}
	return *s.FailedJobsHistoryLimit
}

// cronReference is the time schedules are checked against. A fixed time
// keeps validation deterministic; robfig/cron looks five years ahead of it.
var cronReference = time.Date(2024, time.January, 1, 0, 0, 0, 0, time.UTC)

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
