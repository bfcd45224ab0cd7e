package api_test

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store/resources"
)

func TestBuildLogProxied(t *testing.T) {
	ctx := context.Background()
	commit := strings.Repeat("ab", 20)
	agentSrv := httptest.NewTLSServer(api.AgentHandler(api.AgentConfig{
		Logs: func(context.Context, string, bool, io.Writer) error { return nil },
		BuildLog: func(_ context.Context, ns, name, c string, w io.Writer) error {
			if c != commit {
				return fmt.Errorf("%w: %s", api.ErrUnknownBuild, c)
			}
			_, err := fmt.Fprintf(w, "STEP 1/2: FROM localhost/kat-base:latest (%s/%s)\n", ns, name)
			return err
		},
	}))
	t.Cleanup(agentSrv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(agentSrv.Certificate())
	f := newFixture(t, func(c *api.ServerConfig) {
		c.AgentTransport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}
	})
	host, port, _ := net.SplitHostPort(strings.TrimPrefix(agentSrv.URL, "https://"))
	p, _ := strconv.Atoi(port)
	if err := f.repo.PutNodeRegistration(ctx, resources.NodeRegistration{Name: "n1", AdvertiseAddress: host, AgentPort: p}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.client.ApplyWorkload(ctx, "default", "", archiveOf(t, map[string]string{"workload.kat": workloadKat("web", "default", 1)}),
		api.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
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
	if err := f.client.BuildLog(ctx, "default", "web", "xyz", &buf); !isStatus(err, http.StatusBadRequest) {
		t.Fatalf("malformed commit: %v, want 400", err)
	}
	if err := f.client.BuildLog(ctx, "default", "web", strings.Repeat("c", 40), &buf); !isStatus(err, http.StatusNotFound) {
		t.Fatalf("commit never built: %v, want 404", err)
	}
}
