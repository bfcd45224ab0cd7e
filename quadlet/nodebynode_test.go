package quadlet

import (
	"strings"
	"testing"
)

// daemonWorkload is a DaemonService with an updateStrategy of upd (YAML
// flow mapping, or "" for none).
func daemonWorkload(typ, upd string) string {
	s := "apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata: {name: agent}\nspec:\n  type: " + typ + "\n"
	if typ == TypeService {
		s += "  replicas: 1\n"
	}
	if upd != "" {
		s += "  updateStrategy: " + upd + "\n"
	}
	return s + "  source: {image: a}\n  restartPolicy: {condition: Always}\n  container: {}\n"
}

func TestNodeByNodeSettings(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name, typ, upd string
		// want is the error's prefix; "" parses.
		want        string
		maxParallel int
		verify      []string
		timeout     int
	}{
		{name: "defaults: one node at a time, no verification", typ: TypeDaemonService, maxParallel: 1},
		{name: "parallel and verify", typ: TypeDaemonService,
			upd: "{rolling: {maxParallel: 2}, verify: {command: [/bin/check, --deep]}}", maxParallel: 2,
			verify: []string{"/bin/check", "--deep"}, timeout: 30},
		{name: "verify timeout", typ: TypeDaemonService, upd: "{verify: {command: [x], timeoutSeconds: 5}}",
			maxParallel: 1, verify: []string{"x"}, timeout: 5},
		{name: "maxParallel 0", typ: TypeDaemonService, upd: "{rolling: {maxParallel: 0}}",
			want: "workload.kat:6: spec.updateStrategy.rolling.maxParallel: must be at least 1, got 0"},
		{name: "maxParallel on a Service", typ: TypeService, upd: "{rolling: {maxParallel: 2}}",
			want: "workload.kat:7: spec.updateStrategy.rolling.maxParallel: only a DaemonService"},
		{name: "verify on a Service", typ: TypeService, upd: "{verify: {command: [x]}}",
			want: "workload.kat:7: spec.updateStrategy.verify: only a DaemonService updated Rolling"},
		{name: "verify with Simultaneous", typ: TypeDaemonService, upd: "{type: Simultaneous, verify: {command: [x]}}",
			want: "workload.kat:6: spec.updateStrategy.verify: only a DaemonService updated Rolling"},
		{name: "verify without a command", typ: TypeDaemonService, upd: "{verify: {timeoutSeconds: 3}}",
			want: "workload.kat:6: spec.updateStrategy.verify.command: is required"},
		{name: "verify with an empty command", typ: TypeDaemonService, upd: "{verify: {command: []}}",
			want: "workload.kat:6: spec.updateStrategy.verify.command: must name a command to run"},
		{name: "verify timeout 0", typ: TypeDaemonService, upd: "{verify: {command: [x], timeoutSeconds: 0}}",
			want: "workload.kat:6: spec.updateStrategy.verify.timeoutSeconds: must be at least 1, got 0"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			q, err := ParseWorkload(toFiles(map[string]string{"workload.kat": daemonWorkload(tc.typ, tc.upd)}), ParseOptions{})
			if tc.want != "" {
				if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
					t.Fatalf("ParseWorkload: %v, want an error starting %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseWorkload: %v", err)
			}
			u := q.Workload.Spec.UpdateStrategy
			if got := u.Rolling.NodesAtOnce(); got != tc.maxParallel {
				t.Errorf("NodesAtOnce = %d, want %d", got, tc.maxParallel)
			}
			switch {
			case tc.verify == nil && u.Verify != nil:
				t.Errorf("verify = %+v, want none", u.Verify)
			case tc.verify != nil && (u.Verify == nil || strings.Join(u.Verify.Command, " ") != strings.Join(tc.verify, " ") ||
				u.Verify.TimeoutSeconds != tc.timeout):
				t.Errorf("verify = %+v, want %v with timeout %d", u.Verify, tc.verify, tc.timeout)
			}
		})
	}
}

// TestMaxParallelDefaultKeepsTheHash: writing maxParallel: 1 out changes no
// spec hash, so DaemonServices written before the setting existed keep
// their instances.
func TestMaxParallelDefaultKeepsTheHash(t *testing.T) {
	t.Parallel()
	parse := func(upd string) string {
		t.Helper()
		return mustParse(t, map[string]string{"workload.kat": daemonWorkload(TypeDaemonService, upd)}, ParseOptions{}).SpecHash()
	}
	if a, b := parse(""), parse("{rolling: {maxParallel: 1}}"); a != b {
		t.Errorf("spec hash with maxParallel: 1 written out %s, without %s: want them equal", b, a)
	}
	if a, b := parse(""), parse("{rolling: {maxParallel: 2}}"); a == b {
		t.Errorf("maxParallel: 2 leaves the spec hash %s: want a new one", a)
	}
}
