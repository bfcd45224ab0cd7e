package rejoin

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
)

func leaf(t *testing.T, ca *pki.CA, name string) *Signer {
	t.Helper()
	l, err := ca.Issue(pki.LeafRequest{CommonName: name, DNSNames: []string{name}})
	if err != nil {
		t.Fatal(err)
	}
	s, err := NewSigner(l)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func newCA(t *testing.T, name string) *pki.CA {
	t.Helper()
	ca, err := pki.NewCA(name)
	if err != nil {
		t.Fatal(err)
	}
	return ca
}

// TestRequestsAndAnswers: a request signed by the node it names under the
// cluster CA is taken once; its replay, one signed under another CA, one
// signed by another node, a tampered one, a stale one and one for another
// cluster are ignored. An answer is taken only from a member of the CA,
// for the request it echoes.
func TestRequestsAndAnswers(t *testing.T) {
	t.Parallel()
	ca, foreign := newCA(t, "kat-home-ca"), newCA(t, "kat-other-ca")
	laptop, member := leaf(t, ca, "laptop"), leaf(t, ca, "m1")
	now := time.Now()
	v := NewVerifier(ca.Pool(), "uid-1")

	req, b, err := laptop.NewRequest("uid-1", "home", "laptop", now)
	if err != nil {
		t.Fatal(err)
	}
	got, err := v.Request(b, now)
	if err != nil || got.Node != "laptop" || got.Nonce != req.Nonce {
		t.Fatalf("a valid request: %+v, %v", got, err)
	}
	ignored := func(what string, b []byte, at time.Time, why string) {
		t.Helper()
		_, err := v.Request(b, at)
		if !errors.Is(err, ErrIgnored) || !strings.Contains(err.Error(), why) {
			t.Errorf("%s: %v, want ignored (%s)", what, err, why)
		}
	}
	ignored("the same request again", b, now.Add(time.Second), "replay")
	_, forged, _ := leaf(t, foreign, "laptop").NewRequest("uid-1", "home", "laptop", now)
	ignored("a request signed under another CA", forged, now, "not the cluster CA's")
	_, other, _ := leaf(t, ca, "desk").NewRequest("uid-1", "home", "laptop", now)
	ignored("a request for laptop signed by desk", other, now, `signed by "desk"`)
	_, stale, _ := laptop.NewRequest("uid-1", "home", "laptop", now.Add(-time.Minute))
	ignored("a request a minute old", stale, now, "more than")
	_, elsewhere, _ := laptop.NewRequest("uid-2", "lab", "laptop", now)
	ignored("a request for another cluster", elsewhere, now, "cluster uid-2")
	_, fresh, _ := laptop.NewRequest("uid-1", "home", "laptop", now)
	var e envelope
	if err := json.Unmarshal(fresh, &e); err != nil {
		t.Fatal(err)
	}
	e.Body = []byte(strings.Replace(string(e.Body), `"laptop"`, `"laptoq"`, 1))
	tampered, _ := json.Marshal(e)
	ignored("a tampered request", tampered, now, "bad signature")
	ignored("not a message", []byte("REJOIN_REQUEST home"), now, "ignored")

	a, err := member.Answer(req, Answer{Member: "m1", APIURL: "https://10.0.0.1:9115"}, now)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := v.Answer(a, req, now); err != nil || got.APIURL != "https://10.0.0.1:9115" {
		t.Fatalf("a valid answer: %+v, %v", got, err)
	}
	req2, _, _ := laptop.NewRequest("uid-1", "home", "laptop", now)
	if _, err := v.Answer(a, req2, now); !errors.Is(err, ErrIgnored) {
		t.Errorf("an answer to another request: %v, want ignored", err)
	}
	lure, _ := leaf(t, foreign, "m1").Answer(req, Answer{Member: "m1", APIURL: "https://6.6.6.6:9115"}, now)
	if _, err := v.Answer(lure, req, now); !errors.Is(err, ErrIgnored) {
		t.Errorf("an answer signed under another CA: %v, want ignored", err)
	}
	if _, err := v.Answer(b, req, now); !errors.Is(err, ErrIgnored) {
		t.Errorf("a request passed off as an answer: %v, want ignored", err)
	}
}

// TestAskAndRespond: over UDP a member's responder answers a node's
// request; the same request replayed on the wire is ignored and gets no
// answer.
func TestAskAndRespond(t *testing.T) {
	t.Parallel()
	ca := newCA(t, "kat-home-ca")
	laptop, member := leaf(t, ca, "laptop"), leaf(t, ca, "m1")
	srv, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	var ignored atomic.Int64
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() {
		done <- Respond(ctx, srv, NewVerifier(ca.Pool(), "uid-1"), func(r Request) ([]byte, error) {
			return member.Answer(r, Answer{Member: "m1", APIURL: "https://10.0.0.1:9115", EtcdEndpoints: []string{"https://10.0.0.1:2379"}}, time.Now())
		}, func(error) { ignored.Add(1) })
	}()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Respond: %v", err)
		}
	}()
	cli, err := net.ListenPacket("udp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer cli.Close()
	req, b, err := laptop.NewRequest("uid-1", "home", "laptop", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	v := NewVerifier(ca.Pool(), "uid-1")
	a, err := Ask(t.Context(), cli, srv.LocalAddr(), b, req, v, 10*time.Second)
	if err != nil || a.Member != "m1" || a.EtcdEndpoints[0] != "https://10.0.0.1:2379" {
		t.Fatalf("ask: %+v, %v", a, err)
	}
	if _, err := cli.WriteTo(b, srv.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	polltest.Until(t, 10*time.Second, "the responder ignores the replayed request", func() bool { return ignored.Load() == 1 })
	if _, err := Ask(t.Context(), cli, srv.LocalAddr(), b, req, v, 200*time.Millisecond); err == nil || !strings.Contains(err.Error(), "no answer") {
		t.Fatalf("a replayed request was answered: %v", err)
	}
}
