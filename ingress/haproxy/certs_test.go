package haproxy

import (
	"fmt"
	"slices"
	"strings"
	"testing"
)

// TestPlanCertificates: a new certificate is loaded and listed (new only
// when not loaded yet); a listed one is left alone; an old one goes once
// its hosts' new certificate is listed, and stays while the new one is
// not; the redirect map holds only hosts a listed certificate serves; the
// payload carries the PEM without an empty line; printing a certificate
// shows no PEM.
func TestPlanCertificates(t *testing.T) {
	const dir = "/run/k"
	chain := []byte("-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n\n")
	key := []byte("-----BEGIN PRIVATE KEY-----\nSECRETKEY\n-----END PRIVATE KEY-----\n")
	a1 := NewCertificate("fa1", []string{"a.test"}, chain, key)
	a2 := NewCertificate("fa2", []string{"a.test"}, chain, key)
	b1 := NewCertificate("fb1", []string{"b.test", "www.b.test"}, chain, key)

	load := PlanCertificates([]Certificate{a2, b1}, TLSObserved{
		Loaded: map[string]bool{a1.Name(): true, b1.Name(): true},
		Listed: map[string][]string{a1.Name(): {"a.test"}},
	}, dir)
	if len(load) != 2 || load[0][0] != "new ssl cert "+a2.Name() || load[1][0] != "set ssl cert "+b1.Name()+" <<\n"+string(b1.pem) ||
		load[1][2] != "add ssl crt-list /run/k/certs.list <<\n"+b1.Name()+" b.test www.b.test\n" {
		t.Errorf("load = %q", load)
	}
	if strings.Contains(string(a2.pem), "\n\n") || !strings.HasSuffix(string(a2.pem), "-----END PRIVATE KEY-----\n") {
		t.Errorf("payload %q has an empty line or lost the key", a2.pem)
	}
	for _, f := range []string{"%v", "%s", "%+v", "%#v", "%q"} {
		if s := fmt.Sprintf(f, a2); strings.Contains(s, "SECRETKEY") || strings.Contains(s, "BEGIN") {
			t.Errorf("Sprintf(%s, certificate) = %s", f, s)
		}
	}

	// a2 refused: a1 stays (it serves a.test); b1 listed.
	listed := map[string][]string{a1.Name(): {"a.test"}, b1.Name(): b1.Hosts}
	remove := PlanRemovals([]Certificate{a2, b1}, listed, map[string]bool{a1.Name(): true, a2.Name(): true, b1.Name(): true}, dir)
	if len(remove) != 0 {
		t.Errorf("with a2 refused, remove = %q; want a1 kept", remove)
	}
	o := TLSObserved{TLS: map[string]string{"c.test": "1"}, ACME: map[string]string{"old": "old.x"}}
	cmds := PlanTLSMaps([]Certificate{a2, b1}, listed, map[string]string{"tok": "tok.x"}, o, dir)
	want := []string{"add map /run/k/tls.map a.test 1", "add map /run/k/tls.map b.test 1", "add map /run/k/tls.map www.b.test 1",
		"del map /run/k/tls.map c.test", "add map /run/k/acme.map tok tok.x", "del map /run/k/acme.map old"}
	if !slices.Equal(cmds, want) {
		t.Errorf("maps = %q\nwant %q", cmds, want)
	}
	// a2 listed: a1 goes, from the crt-list first.
	listed[a2.Name()] = a2.Hosts
	remove = PlanRemovals([]Certificate{a2, b1}, listed, map[string]bool{a1.Name(): true}, dir)
	if fmt.Sprint(remove) != fmt.Sprint([][]string{{"del ssl crt-list /run/k/certs.list " + a1.Name(), "del ssl cert " + a1.Name()}}) {
		t.Errorf("with a2 listed, remove = %q", remove)
	}
	// A host no longer wanted: its certificate goes.
	remove = PlanRemovals(nil, map[string][]string{b1.Name(): b1.Hosts}, nil, dir)
	if len(remove) != 1 || len(remove[0]) != 2 {
		t.Errorf("nothing wanted: remove = %q", remove)
	}
	if got := cmdForError(load[1][0]); strings.Contains(got, "BEGIN") || strings.Contains(got, "<<") {
		t.Errorf("cmdForError = %q, shows the payload", got)
	}
	if got := answerForError("unable to load\n-----BEGIN PRIVATE KEY-----\nSECRETKEY\n"); strings.Contains(got, "BEGIN") {
		t.Errorf("answerForError = %q", got)
	}
}
