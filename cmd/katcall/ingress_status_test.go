package main

import (
	"bytes"
	"regexp"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
)

// TestIngressProxyErrorShown: katcall status shows an ingress node's proxy
// and the first line of its last error (a reload HAProxy refused, the last
// good configuration still serving), and an ingress node without a proxy.
func TestIngressProxyErrorShown(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 11, 27, 13, 0, 0, 0, time.UTC)
	var n2, n3, n4 api.Node
	n2.Name, n3.Name, n4.Name = "n2", "n3", "n4"
	n2.Ingress = &api.IngressProxyStatus{Proxy: "HAProxy", Routes: 70, Backends: 70, LastAppliedAt: now.Add(-5 * time.Second),
		LastError: "grow the pool to 256 backends: haproxy did not load the new configuration and keeps serving the last good one\nthe pool of 128 backends is full: d/w128:80 not routed"}
	n3.Labels = map[string]string{ingressRoleLabel: "ingress"}
	nodes := []api.Node{n2, n3, n4}
	var out bytes.Buffer
	if err := ingressNodeTable(&globals{stdout: &out}, nodes, now); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		`n2 +HAProxy +70 +70 +5s ago +grow the pool to 256 backends: haproxy did not load the new configuration and keeps serving the last good one\n`,
		`n3 +no proxy instance`,
	} {
		if !regexp.MustCompile(want).MatchString(out.String()) {
			t.Errorf("katcall status:\n%s\nlacks %q", out.String(), want)
		}
	}
	if regexp.MustCompile(`n4`).MatchString(out.String()) {
		t.Errorf("katcall status lists n4, not an ingress node:\n%s", out.String())
	}
}
