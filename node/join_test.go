package node

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// runLeader opens and runs a leader in dir until the test ends, and waits
// until it serves its API.
func runLeader(t *testing.T, dir string) (*Node, Options) {
	t.Helper()
	o := testOptions(t, dir)
	return runLeaderWith(t, o), o
}

// leaderStartTimeout bounds the wait for a test's leader to serve its API:
// a bound for a hang, not a speed check. The package's tests start their
// leaders (each an embedded etcd) side by side, beside other packages'
// tests, and under the race detector on a busy 2-core machine one took
// more than 30 s.
const leaderStartTimeout = 90 * time.Second

// runLeaderWith opens and runs a leader with options o until the test
// ends, and waits until it serves its API.
func runLeaderWith(t *testing.T, o Options) *Node {
	t.Helper()
	n, err := Open(t.Context(), o, zerolog.Nop())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- n.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
		n.Close()
	})
	polltest.UntilErr(t, leaderStartTimeout, "the leader serves the API", func() error {
		_, err := os.Stat(n.KatcallConfigPath())
		return err
	})
	return n
}

// workerOptions are join options for a worker in dir.
func workerOptions(t *testing.T, dir, name string, leader Options, tokenFile string) Options {
	t.Helper()
	agent := DefaultAgentOptions()
	agent.Podman = filepath.Join(dir, "no-podman")
	agent.BuildDir = filepath.Join(dir, "builds")
	return Options{
		Join: true, LeaderAPI: fmt.Sprintf("127.0.0.1:%d", leader.APIPort), TokenFile: tokenFile,
		DataDir: filepath.Join(dir, "data"), NodeName: name, AdvertiseAddress: "127.0.0.1",
		AgentPort: freePorts(t, 1)[0], NodeLabels: map[string]string{"zone": "a"}, Agent: agent,
		Overlay: OverlayOptions{Mode: "off"},
	}
}

// TestJoin: a node with the token file joins (registered with its labels,
// a certificate whose CN is its name, signed by the cluster CA); it resumes
// without the token; a wrong secret is refused with 403 and writes nothing;
// a token naming another CA fails before the secret is sent; a name held by
// another node is refused with 409.
func TestJoin(t *testing.T) {
	t.Parallel()
	leader, lo := runLeader(t, t.TempDir())
	tokenFile := filepath.Join(lo.DataDir, "join.token")
	tok, err := pki.ParseJoinToken(string(readFile(t, tokenFile)))
	if err != nil {
		t.Fatalf("init's join.token: %v", err)
	}
	if tok.CAFingerprint != pki.Fingerprint(leader.ca.Cert) {
		t.Fatalf("join.token names CA %s, the cluster's is %s", tok.CAFingerprint, pki.Fingerprint(leader.ca.Cert))
	}
	ctx := t.Context()

	wdir := t.TempDir()
	wo := workerOptions(t, wdir, "w1", lo, tokenFile)
	wo.ParentClusterName, wo.NodeType = "nodetest", "laptop"
	w, err := Open(ctx, wo, zerolog.Nop())
	if err != nil {
		t.Fatalf("join: %v", err)
	}
	reg, err := leader.repo.GetNodeRegistration(ctx, "w1")
	if err != nil || reg.Labels["zone"] != "a" || reg.Labels[resources.NodeTypeLabel] != "laptop" ||
		reg.AdvertiseAddress != "127.0.0.1" || reg.AgentPort != wo.AgentPort {
		t.Fatalf("registration of w1: %+v, %v", reg, err)
	}
	if !w.MayDetach() {
		t.Fatal("a worker that joined with --parent-cluster-name may not detach")
	}
	cert, err := pki.ParseCertificate(w.leaf.CertPEM)
	if err != nil {
		t.Fatal(err)
	}
	if cert.Subject.CommonName != "w1" || cert.CheckSignatureFrom(leader.ca.Cert) != nil {
		t.Fatalf("worker certificate CN %q, signed by the CA: %v", cert.Subject.CommonName, cert.CheckSignatureFrom(leader.ca.Cert))
	}
	if _, err := w.repo.ClusterInfo(ctx); err != nil {
		t.Fatalf("the worker reads the cluster through etcd: %v", err)
	}
	w.Close()

	// Resume: no token, no leader address; another cluster's name is
	// refused.
	resume := wo
	resume.TokenFile, resume.LeaderAPI = "", ""
	wrongName := resume
	wrongName.ParentClusterName = "elsewhere"
	if _, err := Open(ctx, wrongName, zerolog.Nop()); err == nil || !strings.Contains(err.Error(), "--parent-cluster-name") {
		t.Fatalf("resume with another --parent-cluster-name: got %v, want an error naming the flag", err)
	}
	w, err = Open(ctx, resume, zerolog.Nop())
	if err != nil {
		t.Fatalf("resume the joined node without the token: %v", err)
	}
	// Run, it heartbeats to the leader over mutual TLS with its
	// certificate; it never campaigns.
	wctx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- w.Run(wctx) }()
	polltest.UntilErr(t, 30*time.Second, "the worker's heartbeat reaches the leader", func() error {
		st, err := leader.repo.GetNodeStatus(ctx, "w1")
		if err != nil {
			return err
		}
		if st.NodeUID != reg.UID {
			return fmt.Errorf("status of uid %s", st.NodeUID)
		}
		return nil
	})
	if id, err := leader.st.GetLeader(ctx); err != nil || id != "n1" {
		t.Fatalf("leader %q (%v) while the worker runs, want n1", id, err)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("worker Run: %v", err)
	}
	w.Close()

	// A wrong secret: 403, nothing registered.
	bad := pki.JoinToken{Secret: strings.Repeat("0", 64), CAFingerprint: tok.CAFingerprint}
	badFile := filepath.Join(t.TempDir(), "bad.token")
	must(t, os.WriteFile(badFile, []byte(bad.String()), 0o600))
	_, err = Open(ctx, workerOptions(t, t.TempDir(), "w2", lo, badFile), zerolog.Nop())
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 403 {
		t.Fatalf("join with a wrong secret: got %v, want 403", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, "w2"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a refused join registered w2: %v", err)
	}

	// Another cluster's name: 409 naming the flag, nothing registered.
	wrong := workerOptions(t, t.TempDir(), "w4", lo, tokenFile)
	wrong.ParentClusterName = "elsewhere"
	_, err = Open(ctx, wrong, zerolog.Nop())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 || !strings.Contains(err.Error(), "--parent-cluster-name") {
		t.Fatalf("join with another cluster's name: got %v, want 409 naming --parent-cluster-name", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, "w4"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a join to another cluster's name registered w4: %v", err)
	}

	// A token naming another CA: refused before anything is sent.
	other, err := pki.NewCA("other")
	if err != nil {
		t.Fatal(err)
	}
	foreign := pki.JoinToken{Secret: tok.Secret, CAFingerprint: pki.Fingerprint(other.Cert)}
	foreignFile := filepath.Join(t.TempDir(), "foreign.token")
	must(t, os.WriteFile(foreignFile, []byte(foreign.String()), 0o600))
	_, err = Open(ctx, workerOptions(t, t.TempDir(), "w3", lo, foreignFile), zerolog.Nop())
	if err == nil || !strings.Contains(err.Error(), "not this cluster's leader") {
		t.Fatalf("join with another CA's fingerprint: got %v", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, "w3"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a join to the wrong CA registered w3: %v", err)
	}

	// The name of another node: 409.
	_, err = Open(ctx, workerOptions(t, t.TempDir(), "w1", lo, tokenFile), zerolog.Nop())
	if !errors.As(err, &apiErr) || apiErr.StatusCode != 409 || !strings.Contains(err.Error(), `node "w1" is registered to another node`) {
		t.Fatalf("join as w1 from another data directory: got %v, want 409", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
