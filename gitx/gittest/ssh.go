package gittest

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/pem"
	"errors"
	"io"
	"net"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"
	"golang.org/x/crypto/ssh/knownhosts"
)

// SSHServer serves the repositories of a Repo's Root for fetching over SSH
// (git upload-pack), on a free loopback port. It accepts one client key and
// presents one host key, both made for it.
type SSHServer struct {
	// RepoURL is the ssh:// URL of the repository, with the user git.
	RepoURL string
	// Addr is the server's host:port.
	Addr string
	// HostKey is the public key the server presents.
	HostKey ssh.PublicKey
	// ClientKeyPEM is the unencrypted private key (OpenSSH PEM) the server
	// accepts.
	ClientKeyPEM []byte
}

// KnownHostsLine is the known_hosts line that lists the server's host key
// for its address.
func (s *SSHServer) KnownHostsLine() string {
	return knownhosts.Line([]string{knownhosts.Normalize(s.Addr)}, s.HostKey)
}

// NewKey makes an ed25519 key pair: its public key and its private key in
// OpenSSH PEM, unencrypted (for Auth.SSHKeyFile, or a known_hosts line
// naming a key no server has).
func NewKey(t testing.TB) (ssh.PublicKey, []byte) {
	t.Helper()
	s, pemBytes := newKey(t)
	return s.PublicKey(), pemBytes
}

func newKey(t testing.TB) (ssh.Signer, []byte) {
	t.Helper()
	_, key, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(key)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(key, "")
	if err != nil {
		t.Fatal(err)
	}
	return signer, pem.EncodeToMemory(block)
}

// ServeSSH serves r over SSH until the test ends. Only fetches are served:
// the one command accepted is git-upload-pack of a repository under Root.
// It skips (or fails, see SkipOrFail) when git is not installed.
func ServeSSH(t testing.TB, r *Repo) *SSHServer {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		SkipOrFail(t, "git is not installed")
	}
	hostKey, _ := newKey(t)
	client, clientPEM := newKey(t)
	cfg := &ssh.ServerConfig{
		PublicKeyCallback: func(_ ssh.ConnMetadata, key ssh.PublicKey) (*ssh.Permissions, error) {
			if string(key.Marshal()) != string(client.PublicKey().Marshal()) {
				return nil, errors.New("unknown client key")
			}
			return nil, nil
		},
	}
	cfg.AddHostKey(hostKey)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	srv := &sshServer{root: r.Root, cfg: cfg, ctx: ctx, conns: map[net.Conn]bool{}}
	srv.wg.Go(func() { srv.accept(ln) })
	t.Cleanup(func() {
		cancel()
		_ = ln.Close()
		srv.closeConns()
		srv.wg.Wait()
	})
	addr := ln.Addr().String()
	return &SSHServer{
		RepoURL: "ssh://git@" + addr + "/" + filepath.Base(r.Bare),
		Addr:    addr, HostKey: hostKey.PublicKey(), ClientKeyPEM: clientPEM,
	}
}

// sshServer is ServeSSH's server. Its goroutines (the accept loop, one per
// connection and one per session) end when ctx is cancelled and the
// listener and connections are closed; wg joins them.
type sshServer struct {
	root string
	cfg  *ssh.ServerConfig
	ctx  context.Context
	wg   sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]bool
	closed bool
}

func (s *sshServer) accept(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = true
		s.mu.Unlock()
		s.wg.Go(func() {
			defer func() {
				s.mu.Lock()
				delete(s.conns, c)
				s.mu.Unlock()
				_ = c.Close()
			}()
			s.serveConn(c)
		})
	}
}

func (s *sshServer) closeConns() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	for c := range s.conns {
		_ = c.Close()
	}
}

func (s *sshServer) serveConn(c net.Conn) {
	_, chans, reqs, err := ssh.NewServerConn(c, s.cfg)
	if err != nil {
		return
	}
	s.wg.Go(func() { ssh.DiscardRequests(reqs) })
	for nc := range chans {
		if nc.ChannelType() != "session" {
			_ = nc.Reject(ssh.UnknownChannelType, "only sessions")
			continue
		}
		ch, creqs, err := nc.Accept()
		if err != nil {
			continue
		}
		s.wg.Go(func() { s.serveSession(ch, creqs) })
	}
}

// serveSession runs the one git-upload-pack command a session asks for.
func (s *sshServer) serveSession(ch ssh.Channel, reqs <-chan *ssh.Request) {
	defer ch.Close()
	for req := range reqs {
		if req.Type != "exec" {
			_ = req.Reply(req.Type == "env", nil) // go-git may set GIT_PROTOCOL
			continue
		}
		var payload struct{ Command string }
		if err := ssh.Unmarshal(req.Payload, &payload); err != nil {
			_ = req.Reply(false, nil)
			return
		}
		name, arg, _ := strings.Cut(payload.Command, " ")
		dir := filepath.Join(s.root, path.Clean("/"+strings.Trim(arg, "'\"")))
		if name != "git-upload-pack" || !strings.HasPrefix(dir, s.root+string(filepath.Separator)) {
			_ = req.Reply(false, nil)
			return
		}
		_ = req.Reply(true, nil)
		// Not cmd.Stdin = ch: Wait would wait for the client to close its
		// side, and go-git waits for the exit status first.
		cmd := exec.CommandContext(s.ctx, "git", "upload-pack", dir)
		cmd.Stdout, cmd.Stderr = ch, ch.Stderr()
		status := uint32(1)
		if stdin, err := cmd.StdinPipe(); err == nil && cmd.Start() == nil {
			// The copy ends when Wait closes stdin or the deferred
			// ch.Close ends the read.
			s.wg.Go(func() { _, _ = io.Copy(stdin, ch) })
			if cmd.Wait() == nil {
				status = 0
			}
		}
		_, _ = ch.SendRequest("exit-status", false, ssh.Marshal(struct{ Status uint32 }{status}))
		return
	}
}
