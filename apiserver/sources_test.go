package apiserver_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/store/resources"
)

// fakeGitOps records triggers; suspend/resume go straight to the repo.
type fakeGitOps struct {
	repo     *resources.Repo
	triggers atomic.Int64
}

func (f *fakeGitOps) Trigger(string) (int, error) { f.triggers.Add(1); return 1, nil }
func (f *fakeGitOps) Suspend(ctx context.Context, ns, name string) (*api.WorkloadMeta, error) {
	return f.repo.SetSuspended(ctx, ns, name, true)
}
func (f *fakeGitOps) Resume(ctx context.Context, ns, name string) (*api.WorkloadMeta, error) {
	return f.repo.SetSuspended(ctx, ns, name, false)
}

func TestSources(t *testing.T) {
	t.Parallel()
	var g fakeGitOps
	var webhookHits atomic.Int64
	f := newFixture(t, func(c *apiserver.Config) {
		g.repo = c.Repo
		c.GitOps = &g
		c.Webhooks = http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			webhookHits.Add(1)
			w.WriteHeader(http.StatusAccepted)
		})
	})
	ctx := context.Background()

	src, err := f.client.PutSource(ctx, api.SourceSpec{Name: "config", URL: "https://git.example.com/acme/config.git"})
	if err != nil {
		t.Fatal(err)
	}
	if src.Spec.Branch != "main" || src.Spec.Path != "." || src.Spec.IntervalSeconds != 30 {
		t.Errorf("defaults not applied: %+v", src.Spec)
	}
	list, err := f.client.ListSources(ctx)
	if err != nil || len(list) != 1 || list[0].Spec.Name != "config" {
		t.Fatalf("ListSources = %+v, %v", list, err)
	}
	st, err := f.client.Status(ctx)
	if err != nil || len(st.Sources) != 1 {
		t.Fatalf("status sources = %+v, %v", st.Sources, err)
	}

	before := f.snapshot(t)
	for _, tc := range []struct {
		name, body, want string
	}{
		{"password in URL", `{"url":"https://u:p@git.example.com/x.git"}`, "must not hold a password"},
		{"bad scheme", `{"url":"ftp://git.example.com/x.git"}`, "scheme"},
		{"bad interval", `{"url":"file:///srv/x.git","intervalSeconds":1}`, "intervalSeconds"},
		{"escaping path", `{"url":"file:///srv/x.git","path":"../etc"}`, "path"},
		{"unknown field", `{"url":"file:///srv/x.git","bogus":1}`, "bogus"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, e := f.raw(t, http.MethodPut, "/v1alpha1/sources/other", token, []byte(tc.body))
			if code != http.StatusBadRequest || !strings.Contains(e.Message, tc.want) {
				t.Errorf("PUT = %d %q, want 400 mentioning %q", code, e.Message, tc.want)
			}
		})
	}
	if after := f.snapshot(t); after != before {
		t.Error("a refused source spec changed the state store")
	}

	res, err := f.client.Sync(ctx, "config")
	if err != nil || res.Triggered != 1 || g.triggers.Load() != 1 {
		t.Errorf("Sync = %+v, %v (triggers %d)", res, err, g.triggers.Load())
	}
	var apiErr *api.Error
	if _, err := f.client.Sync(ctx, "nope"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("Sync of an unknown source = %v, want 404", err)
	}

	// Webhooks are served without a bearer token.
	if code, _ := f.raw(t, http.MethodPost, "/v1alpha1/webhooks/github", "", nil); code != http.StatusAccepted || webhookHits.Load() != 1 {
		t.Errorf("webhook without a token = %d (hits %d), want 202 from the webhook handler", code, webhookHits.Load())
	}

	// Suspend needs a Git-owned workload.
	q := mustParse(t, workloadKat("web", "default", 1))
	if _, err := f.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.SuspendWorkload(ctx, "default", "web"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusConflict {
		t.Errorf("suspend of an API-owned workload = %v, want 409", err)
	}
	if _, err := f.repo.ApplyWorkload(ctx, resources.ApplyRequest{Quadlet: q, Owner: api.Owner{Kind: api.OwnerGit, Source: "config", Path: "web"}}); err != nil {
		t.Fatal(err)
	}
	w, err := f.client.SuspendWorkload(ctx, "default", "web")
	if err != nil || !w.Suspended {
		t.Fatalf("suspend = %+v, %v", w, err)
	}
	if w, err = f.client.ResumeWorkload(ctx, "default", "web"); err != nil || w.Suspended {
		t.Fatalf("resume = %+v, %v", w, err)
	}

	if err := f.client.DeleteSource(ctx, "config"); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.GetSource(ctx, "config"); !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusNotFound {
		t.Errorf("GetSource after delete = %v, want 404", err)
	}
}
