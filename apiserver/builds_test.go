package apiserver_test

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
)

func TestBuildLogProxied(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	commit := strings.Repeat("ab", 20)
	f := newAgentFixture(t, apiserver.AgentConfig{
		Logs: func(context.Context, string, api.LogOptions, io.Writer) error { return nil },
		BuildLog: func(_ context.Context, ns, name, c string, w io.Writer) error {
			if c != commit {
				return fmt.Errorf("%w: %s", apiserver.ErrUnknownBuild, c)
			}
			_, err := fmt.Fprintf(w, "STEP 1/2: FROM localhost/kat-base:latest (%s/%s)\n", ns, name)
			return err
		},
	})
	var buf bytes.Buffer
	if err := f.client.BuildLog(ctx, "default", "web", "", &buf); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("build log without any commit: %v, want 404", err)
	}
	rec := fmt.Sprintf(`{"node":"n1","commit":%q,"startedAt":%q}`, commit, time.Now().Format(time.RFC3339))
	if err := f.repo.PutBuildRecordJSON(ctx, "default", "web", commit, "n1", []byte(rec)); err != nil {
		t.Fatal(err)
	}
	d, err := f.client.WorkloadStatus(ctx, "default", "web")
	if err != nil || len(d.Builds) != 1 || d.Builds[0].Node != "n1" || d.Builds[0].Commit != commit {
		t.Fatalf("status builds = %+v, %v", d, err)
	}
	for _, c := range []string{commit, commit[:12], commit[:7]} {
		buf.Reset()
		if err := f.client.BuildLog(ctx, "default", "web", c, &buf); err != nil || buf.String() != "STEP 1/2: FROM localhost/kat-base:latest (default/web)\n" {
			t.Fatalf("build log at %s = %q, %v", c, buf.String(), err)
		}
	}
	// The answer names the node that built the commit and the commit.
	code, h := f.header(t, "/v1alpha1/n/default/workloads/web/logs?build=true&commit="+commit[:7])
	if code != http.StatusOK || h.Get(api.HeaderNode) != "n1" || h.Get(api.HeaderCommit) != commit {
		t.Fatalf("build log: %d, %s %q, %s %q, want 200, n1 and %s (header %v)", code, api.HeaderNode, h.Get(api.HeaderNode),
			api.HeaderCommit, h.Get(api.HeaderCommit), commit, h)
	}
	if err := f.client.BuildLog(ctx, "default", "web", "xyz", &buf); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("malformed commit: %v, want 400", err)
	}
	if err := f.client.BuildLog(ctx, "default", "web", strings.Repeat("c", 40), &buf); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("commit never built: %v, want 404", err)
	}
}
