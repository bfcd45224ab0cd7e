package quadlet

import "testing"

// TestJobDefaultsKeepTheSpecHash checks that the JobDefinition fields KAT
// added to the spec, written out at their defaults, hash like a job.kat
// without them (so Jobs applied before them keep their spec hash), and that
// another value changes the hash and reads back through the accessors.
func TestJobDefaultsKeepTheSpecHash(t *testing.T) {
	workload := `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: report}
spec:
  type: Job
  source: {image: localhost/kat-base:latest}
  restartPolicy: {condition: Never}
  container: {command: ["true"]}
`
	job := func(extra string) map[string][]byte {
		return map[string][]byte{"workload.kat": []byte(workload),
			"job.kat": []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: JobDefinition\nspec:\n  schedule: \"*/5 * * * *\"\n" + extra)}
	}
	parse := func(files map[string][]byte) *Quadlet {
		t.Helper()
		q, err := ParseWorkload(files, ParseOptions{})
		if err != nil {
			t.Fatalf("parse: %v", err)
		}
		return q
	}
	base := parse(job(""))
	explicit := parse(job("  concurrencyPolicy: Forbid\n  successfulJobsHistoryLimit: 3\n  failedJobsHistoryLimit: 1\n"))
	if base.SpecHash() != explicit.SpecHash() {
		t.Errorf("explicit defaults changed the spec hash: %s, want %s", explicit.SpecHash(), base.SpecHash())
	}
	if s := base.Job.Spec; s.Concurrency() != ConcurrencyForbid || s.SuccessfulHistory() != 3 || s.FailedHistory() != 1 {
		t.Errorf("defaults = %s, %d, %d; want Forbid, 3, 1", s.Concurrency(), s.SuccessfulHistory(), s.FailedHistory())
	}
	other := parse(job("  concurrencyPolicy: Replace\n  successfulJobsHistoryLimit: 0\n  failedJobsHistoryLimit: 5\n"))
	if other.SpecHash() == base.SpecHash() {
		t.Error("other values kept the spec hash")
	}
	if s := other.Job.Spec; s.Concurrency() != ConcurrencyReplace || s.SuccessfulHistory() != 0 || s.FailedHistory() != 5 {
		t.Errorf("values = %s, %d, %d; want Replace, 0, 5", s.Concurrency(), s.SuccessfulHistory(), s.FailedHistory())
	}
}
