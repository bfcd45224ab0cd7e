package agent

import (
	"errors"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

func TestVerifyDecisions(t *testing.T) {
	t.Parallel()
	v := &quadlet.VerifyCommand{Command: []string{"check"}, TimeoutSeconds: 5}
	due := []struct {
		name  string
		v     *quadlet.VerifyCommand
		st    verifyState
		ready bool
		want  bool
	}{
		{"no command", nil, verifyState{}, true, false},
		{"not ready yet", v, verifyState{}, false, false},
		{"ready, not run", v, verifyState{}, true, true},
		{"ran once: never again", v, verifyState{Status: api.VerifyFailed}, true, false},
	}
	for _, tc := range due {
		if got := verifyDue(tc.v, tc.st, tc.ready); got != tc.want {
			t.Errorf("verifyDue %s = %v, want %v", tc.name, got, tc.want)
		}
	}
	long := strings.Repeat("x", 1000) + "the end"
	results := []struct {
		name        string
		res         runtime.ExecResult
		err         error
		want, start string
	}{
		{"exit 0", runtime.ExecResult{Output: []byte("ok")}, nil, api.VerifyPassed, ""},
		{"exit 2", runtime.ExecResult{ExitCode: 2, Output: []byte(" bad\n")}, nil, api.VerifyFailed, "exit 2: bad"},
		{"long output keeps its end", runtime.ExecResult{ExitCode: 1, Output: []byte(long)}, nil, api.VerifyFailed, "exit 1: ...xxx"},
		{"timeout", runtime.ExecResult{}, runtime.ErrExecTimeout, api.VerifyFailed, "still running after 5s"},
		{"runtime error", runtime.ExecResult{}, errors.New("no such container"), api.VerifyFailed, "run: no such container"},
	}
	for _, tc := range results {
		got := verifyResult(tc.res, tc.err, 5*time.Second)
		if got.Status != tc.want || !strings.HasPrefix(got.Message, tc.start) || len(got.Message) > verifyOutputTail+20 {
			t.Errorf("verifyResult %s = %+v, want %s %q...", tc.name, got, tc.want, tc.start)
		}
	}
	if got := verifyResult(runtime.ExecResult{ExitCode: 1, Output: []byte(long)}, nil, time.Second); !strings.HasSuffix(got.Message, "the end") {
		t.Errorf("long output: %q, want its end kept", got.Message)
	}
}
