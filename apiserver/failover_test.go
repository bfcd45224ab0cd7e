package apiserver_test

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// TestClusterServersListsMembersLeaderFirst: the servers katcall refreshes
// its list from are the etcd members' API URLs, the leader's first, and no
// worker's.
func TestClusterServersListsMembersLeaderFirst(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	for _, reg := range []api.NodeRegistration{
		{Name: "m1", AdvertiseAddress: "10.0.0.1", APIPort: 9115, EtcdMember: true},
		{Name: "m2", AdvertiseAddress: "10.0.0.2", APIPort: 9115, EtcdMember: true},
		{Name: "w1", AdvertiseAddress: "10.0.0.3", APIPort: 9115},
		{Name: "m3", AdvertiseAddress: "fd00::3", APIPort: 9116, EtcdMember: true},
	} {
		if err := f.repo.PutNodeRegistration(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.repo.SetLeaderEndpoint(ctx, api.Leader{Node: "m2", APIURL: "https://10.0.0.2:9115", Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	cs, err := f.client.ClusterServers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"https://10.0.0.2:9115", "https://10.0.0.1:9115", "https://[fd00::3]:9116"}
	if cs.Leader != want[0] || strings.Join(cs.Servers, " ") != strings.Join(want, " ") {
		t.Fatalf("servers = %+v, want leader %s and %v", cs, want[0], want)
	}
}

// TestClientFailsOver: a client whose first server is down, and whose
// second answers 503 unavailable (a member without a leader), gets its
// answer from the third, which the next request tries first; a POST whose
// answer was lost after it was sent is not sent again elsewhere; a client of
// one server that is down fails at once, naming it.
func TestClientFailsOver(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	f := newFixture(t, nil)
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: f.srv.Certificate().Raw})

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String()
	ln.Close()
	var noLeaderHits atomic.Int64
	noLeader := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		noLeaderHits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusServiceUnavailable)
		_, _ = w.Write([]byte(`{"error":"unavailable","message":"no leader: this member cannot reach one"}`))
	}))
	noLeader.TLS = f.srv.TLS // the fixture's certificate, which ca trusts
	noLeader.StartTLS()
	t.Cleanup(noLeader.Close)

	c, err := apiclient.New(apiclient.Config{Server: dead, Servers: []string{noLeader.URL, f.srv.URL}, Token: token, CAData: ca})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.ListWorkloads(ctx, ""); err != nil {
		t.Fatalf("list through the third server: %v", err)
	}
	if c.Server() != f.srv.URL || !c.FailedOver() || noLeaderHits.Load() != 1 {
		t.Fatalf("server in use %s (failed over %v), 503 server hit %d times; want %s, true, 1", c.Server(), c.FailedOver(), noLeaderHits.Load(), f.srv.URL)
	}
	if _, err := c.ListWorkloads(ctx, ""); err != nil || noLeaderHits.Load() != 1 {
		t.Fatalf("second list: %v, 503 server hit %d times; the server that answered should be tried first", err, noLeaderHits.Load())
	}

	// A POST whose connection broke after it was sent may have been
	// applied: it is not repeated on another server.
	var broken atomic.Int64
	hangUp := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		broken.Add(1)
		conn, _, err := w.(http.Hijacker).Hijack()
		if err == nil {
			conn.Close()
		}
	}))
	hangUp.TLS = f.srv.TLS
	hangUp.StartTLS()
	t.Cleanup(hangUp.Close)
	c2, err := apiclient.New(apiclient.Config{Server: hangUp.URL, Servers: []string{f.srv.URL}, Token: token, CAData: ca})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c2.Sync(ctx, ""); err == nil || broken.Load() != 1 || c2.FailedOver() {
		t.Fatalf("POST to a server that hung up: err %v, sent %d times, failed over %v; want an error, 1, false", err, broken.Load(), c2.FailedOver())
	}
	// A GET is safe to repeat: the same client goes on to the next.
	if _, err := c2.ListWorkloads(ctx, ""); err != nil || !c2.FailedOver() {
		t.Fatalf("GET after a hang-up: %v (failed over %v)", err, c2.FailedOver())
	}

	// A client of one server tries it once (however long the failover
	// timeout), and the error names it.
	one, err := apiclient.New(apiclient.Config{Server: dead, Token: token, CAData: ca, FailoverTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = one.ListWorkloads(ctx, ""); err == nil || !strings.Contains(err.Error(), strings.TrimPrefix(dead, "https://")) {
		t.Fatalf("one dead server: %v; want an error naming it", err)
	}
	hits := noLeaderHits.Load()
	alone, err := apiclient.New(apiclient.Config{Server: noLeader.URL, Token: token, CAData: ca, FailoverTimeout: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if _, err = alone.ListWorkloads(ctx, ""); statusOf(err) != http.StatusServiceUnavailable || !strings.Contains(err.Error(), "no leader") || noLeaderHits.Load() != hits+1 {
		t.Fatalf("one server without a leader: %v after %d tries; want one try and its message", err, noLeaderHits.Load()-hits)
	}
}
