package main

import (
	"context"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
)

// TestKatcallFailsOverAndRefreshesServers: with a configuration whose server
// is down, katcall answers through the next of its servers, then rewrites
// server and servers from the cluster's members (the leader first), keeping
// the token, the CA and the comments.
func TestKatcallFailsOverAndRefreshesServers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	c := newRealCluster(t)
	b, err := os.ReadFile(c.config)
	if err != nil {
		t.Fatal(err)
	}
	var fc fileConfig
	if err := yaml.Unmarshal(b, &fc); err != nil {
		t.Fatal(err)
	}
	live, err := url.Parse(fc.Server)
	if err != nil {
		t.Fatal(err)
	}
	port, _ := strconv.Atoi(live.Port())
	// The live server is the leader, and a member; another member is down.
	for _, reg := range []api.NodeRegistration{
		{Name: "m-live", AdvertiseAddress: live.Hostname(), APIPort: port, EtcdMember: true},
		{Name: "m-other", AdvertiseAddress: "127.0.0.2", APIPort: 9115, EtcdMember: true},
	} {
		if err := c.repo.PutNodeRegistration(ctx, reg); err != nil {
			t.Fatal(err)
		}
	}
	if err := c.repo.SetLeaderEndpoint(ctx, api.Leader{Node: "m-live", APIURL: fc.Server, Since: time.Now()}); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	dead := "https://" + ln.Addr().String()
	ln.Close()
	stale := "# my cluster\n" + strings.Replace(string(b), "server: "+fc.Server, "server: "+dead+"\nservers: ["+fc.Server+"]", 1)
	if err := os.WriteFile(c.config, []byte(stale), 0o600); err != nil {
		t.Fatal(err)
	}

	if code, out, errOut := c.katcall("get", "nodes"); code != 0 || !strings.Contains(out, "m-live") {
		t.Fatalf("get nodes with the first server down: %d\n%s%s", code, out, errOut)
	}
	b, err = os.ReadFile(c.config)
	if err != nil {
		t.Fatal(err)
	}
	var after fileConfig
	if err := yaml.Unmarshal(b, &after); err != nil {
		t.Fatal(err)
	}
	if after.Server != fc.Server || strings.Join(after.Servers, " ") != "https://127.0.0.2:9115" ||
		after.Token != fc.Token || after.CertificateAuthorityData != fc.CertificateAuthorityData || !strings.HasPrefix(string(b), "# my cluster\n") {
		t.Fatalf("configuration after failing over:\n%s\nwant server %s (the leader), servers [https://127.0.0.2:9115], the rest kept", b, fc.Server)
	}
	if info, err := os.Stat(c.config); err != nil || info.Mode().Perm() != 0o600 {
		t.Fatalf("configuration mode %v (%v), want 0600: it holds the token", info.Mode(), err)
	}
}
