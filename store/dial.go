package store

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strings"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap"
)

// DefaultDialTimeout is how long Dial waits for an external etcd to answer
// when DialConfig.DialTimeout is zero.
const DefaultDialTimeout = 5 * time.Second

// probeTimeout bounds the diagnosis of a failed Dial.
const probeTimeout = 2 * time.Second

// DialConfig says how Dial reaches an external etcd cluster.
type DialConfig struct {
	// Endpoints are the etcd client URLs, e.g. "https://10.0.0.1:2379" or
	// "unix:///run/etcd.sock". Required.
	Endpoints []string
	// TLS is the client TLS configuration (CA pool and, for client-cert
	// authentication, the client certificate). Nil means plain connections.
	TLS *tls.Config
	// DialTimeout bounds connecting and the reachability check. Default
	// DefaultDialTimeout (5s).
	DialTimeout time.Duration
	// AutoSyncInterval, when set, refreshes the endpoints from the etcd
	// cluster's member list this often, so that a client of a cluster of
	// several members keeps reaching it when members come and go. Default
	// 0: the endpoints stay as given.
	AutoSyncInterval time.Duration
}

// Dial connects to an external etcd cluster and checks that it answers a
// read before returning. The returned store owns its client: Close closes it.
func Dial(ctx context.Context, cfg DialConfig) (*Etcd, error) {
	if len(cfg.Endpoints) == 0 {
		return nil, fmt.Errorf("dial etcd: %w: no endpoints", ErrInvalidArgument)
	}
	timeout := cfg.DialTimeout
	if timeout <= 0 {
		timeout = DefaultDialTimeout
	}
	eps := strings.Join(cfg.Endpoints, ",")
	cli, err := clientv3.New(clientv3.Config{
		Endpoints:        cfg.Endpoints,
		TLS:              cfg.TLS,
		DialTimeout:      timeout,
		AutoSyncInterval: cfg.AutoSyncInterval,
		// Detect dead connections (a partitioned member) within ~40s.
		DialKeepAliveTime:    30 * time.Second,
		DialKeepAliveTimeout: 10 * time.Second,
		Logger:               zap.NewNop(),
	})
	if err != nil {
		return nil, fmt.Errorf("dial etcd at %s: %w", eps, err)
	}
	cctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	// A user without a grant on the key is denied: etcd answered.
	if _, err := cli.Get(cctx, "health", clientv3.WithCountOnly()); err != nil && !errors.Is(err, ErrPermissionDenied) {
		_ = cli.Close()
		if why := diagnose(ctx, cfg.Endpoints, cfg.TLS); why != "" {
			return nil, fmt.Errorf("dial etcd at %s: check reachability: %w (%s)", eps, err, why)
		}
		return nil, fmt.Errorf("dial etcd at %s: check reachability: %w", eps, err)
	}
	if cfg.AutoSyncInterval > 0 {
		// The members' URLs now, not after the first interval: the
		// endpoints given may be those of when the node joined. A failure
		// keeps them; the automatic sync tries again.
		_ = cli.Sync(cctx)
	}
	return New(cli, WithOwnedClient()), nil
}

// diagnose connects to each endpoint directly to explain a failed
// reachability check (the etcd client only reports a timeout). It returns ""
// when it finds nothing more specific.
func diagnose(ctx context.Context, endpoints []string, tlsCfg *tls.Config) string {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	var why []string
	for _, ep := range endpoints {
		if err := probe(ctx, ep, tlsCfg); err != nil {
			why = append(why, fmt.Sprintf("%s: %v", ep, err))
		}
	}
	return strings.Join(why, "; ")
}

// probe opens one connection to ep and, for TLS endpoints, completes the
// handshake and waits briefly for the server to reject it.
func probe(ctx context.Context, ep string, tlsCfg *tls.Config) error {
	u, err := url.Parse(ep)
	if err != nil {
		return fmt.Errorf("parse endpoint: %w", err)
	}
	network, addr, secure := "tcp", u.Host, u.Scheme == "https"
	if u.Scheme == "unix" || u.Scheme == "unixs" {
		network, addr, secure = "unix", u.Host+u.Path, u.Scheme == "unixs"
	}
	if secure && tlsCfg == nil {
		return errors.New("endpoint needs TLS but DialConfig.TLS is nil")
	}
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if !secure {
		return nil
	}
	cfg := tlsCfg.Clone()
	if cfg.ServerName == "" {
		cfg.ServerName = u.Hostname()
	}
	cfg.NextProtos = []string{"h2"}
	tc := tls.Client(conn, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		return fmt.Errorf("tls handshake: %w", err)
	}
	// With TLS 1.3 the server checks the client certificate after the
	// handshake; a rejection arrives as an alert on the first read.
	_ = tc.SetReadDeadline(time.Now().Add(probeTimeout / 4))
	var b [1]byte
	if _, err := tc.Read(b[:]); err != nil && !errors.Is(err, os.ErrDeadlineExceeded) {
		return fmt.Errorf("tls: %w", err)
	}
	return nil
}
