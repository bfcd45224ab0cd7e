package store

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"sort"
	"sync"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.etcd.io/etcd/server/v3/etcdserver/api/v3client"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Defaults of EmbedConfig.
const (
	// DefaultMemberName is the member name when EmbedConfig.Name is empty.
	DefaultMemberName = "default"
	// DefaultListenClientURL is where clients connect by default.
	DefaultListenClientURL = "http://127.0.0.1:2379"
	// DefaultListenPeerURL is where peers connect by default.
	DefaultListenPeerURL = "http://127.0.0.1:2380"
	// DefaultQuotaBackendBytes is etcd's default database size limit, 2 GiB.
	DefaultQuotaBackendBytes = 2 << 30
	// DefaultAutoCompactionMode counts the retention in revisions.
	DefaultAutoCompactionMode = "revision"
	// DefaultAutoCompactionRetention keeps the last 1000 revisions.
	DefaultAutoCompactionRetention = "1000"
	// DefaultReadyTimeout bounds the wait for a member to serve.
	DefaultReadyTimeout = 60 * time.Second
	// DefaultInitialClusterToken names the cluster at bootstrap.
	DefaultInitialClusterToken = "kat-etcd"
	// DefaultSnapshotCatchUpEntries is how many applied raft entries a
	// member keeps in memory for a slow follower: etcd's 5,000 suit its
	// ten thousand writes a second, and hold tens of MiB once KAT writes
	// thousands of workloads in batches of 100 operations; a small
	// cluster's follower further behind gets a snapshot instead.
	DefaultSnapshotCatchUpEntries = 200
)

// ErrInvalidConfig is returned by StartEmbedded for a configuration it
// refuses before starting anything.
var ErrInvalidConfig = errors.New("store: invalid embedded etcd config")

// ErrNotReady is returned by StartEmbedded when the server did not become
// ready within EmbedConfig.ReadyTimeout.
var ErrNotReady = errors.New("store: embedded etcd not ready")

// TLSFiles names the PEM files of one side (client or peer) of an embedded
// etcd. Setting it enables TLS and requires client certificates signed by
// TrustedCAFile.
type TLSFiles struct {
	// CertFile is the server certificate. Required.
	CertFile string
	// KeyFile is the server certificate's private key. Required.
	KeyFile string
	// TrustedCAFile is the CA that must have signed client certificates.
	// Required.
	TrustedCAFile string
	// AllowedCNs, when set, admits only client certificates whose common
	// name is one of them. For PeerTLS it keeps a certificate of the same
	// CA issued to a node that is no member (a worker's) from acting as a
	// peer. Default: any certificate of TrustedCAFile.
	AllowedCNs []string
}

// EmbedConfig configures an embedded etcd member.
//
// URLs are "http://IP:port", "https://IP:port", "unix:///abs/path" or
// "unixs:///abs/path". Port 0 binds a free port (see Embedded.ClientURLs).
// Unix sockets suit tests and single-member servers only: other members
// cannot reach a unix peer URL.
type EmbedConfig struct {
	// Name is the member name. Default DefaultMemberName ("default").
	Name string
	// DataDir holds the member's data (WAL and snapshots); it is created if
	// missing. Required. Restarting on the same DataDir keeps the data and the
	// cluster membership (InitialCluster and ClusterState are then ignored).
	DataDir string
	// ListenClientURLs are where clients connect. Default
	// DefaultListenClientURL ("http://127.0.0.1:2379").
	ListenClientURLs []string
	// AdvertiseClientURLs are announced to clients. Default ListenClientURLs.
	AdvertiseClientURLs []string
	// ListenPeerURLs are where other members connect. Default
	// DefaultListenPeerURL ("http://127.0.0.1:2380").
	ListenPeerURLs []string
	// AdvertisePeerURLs are announced to other members. Default
	// ListenPeerURLs.
	AdvertisePeerURLs []string
	// InitialCluster lists the members of a new cluster as
	// "name=peerURL,...". Default: this member alone, Name=each advertise peer
	// URL.
	InitialCluster string
	// InitialClusterToken keeps distinct clusters apart. Default
	// DefaultInitialClusterToken ("kat-etcd").
	InitialClusterToken string
	// ClusterState is "new" to bootstrap a cluster or "existing" to join
	// one. Default "new".
	ClusterState string
	// ClientTLS enables TLS with client-certificate authentication on the
	// client URLs, which must then be https or unixs. Nil (the default) means
	// plain connections.
	ClientTLS *TLSFiles
	// PeerTLS enables TLS with client-certificate authentication on the peer
	// URLs, which must then be https or unixs. Nil (the default) means plain
	// connections.
	PeerTLS *TLSFiles
	// QuotaBackendBytes is the database size at which etcd refuses writes.
	// Default DefaultQuotaBackendBytes (2 GiB, etcd's default).
	QuotaBackendBytes int64
	// AutoCompactionMode is "revision" (AutoCompactionRetention counts
	// revisions) or "periodic" (AutoCompactionRetention is a duration such as
	// "1h"). Default DefaultAutoCompactionMode ("revision").
	AutoCompactionMode string
	// AutoCompactionRetention is how much history automatic compaction keeps.
	// Default DefaultAutoCompactionRetention: the last 1000 revisions, so
	// compaction is on by default. "0" turns it off.
	AutoCompactionRetention string
	// ReadyTimeout bounds the wait for the member to be ready (for a new
	// multi-member cluster, for quorum). Default DefaultReadyTimeout (60s).
	ReadyTimeout time.Duration
	// LogOutput receives etcd's own logs, as JSON lines at warn level and
	// above. Nil (the default) discards them.
	LogOutput io.Writer
	// UnsafeNoFsync skips fsync. For tests only: a crash can lose or corrupt
	// data. Default false.
	UnsafeNoFsync bool
	// ElectionMs is the raft election timeout: a follower that hears
	// nothing from the leader this long starts an election, and a new
	// raft leader extends every lease by as much. At least five
	// heartbeats (500). Default etcd's, 1000. Every member of a cluster
	// should use the same.
	ElectionMs uint
	// SnapshotCatchUpEntries is how many applied raft entries the member
	// keeps in memory for slow followers. Default
	// DefaultSnapshotCatchUpEntries.
	SnapshotCatchUpEntries uint64
}

// Embedded is an etcd member running inside this process.
type Embedded struct {
	etcd       *embed.Etcd
	client     *clientv3.Client
	clientURLs []string

	closeOnce sync.Once
	closeErr  error
}

// StartEmbedded validates cfg, starts the member and waits until it is ready
// to serve, ctx ends or cfg.ReadyTimeout passes. On any failure it stops what
// it started and returns an error naming the cause (for a port in use, the
// address).
func StartEmbedded(ctx context.Context, cfg EmbedConfig) (*Embedded, error) {
	ecfg, err := cfg.etcdConfig()
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("start embedded etcd %q: %w", ecfg.Name, err)
	}
	e, err := embed.StartEtcd(ecfg)
	if err != nil {
		return nil, fmt.Errorf("start embedded etcd %q in %s: %w", ecfg.Name, ecfg.Dir, err)
	}
	timeout := cfg.ReadyTimeout
	if timeout <= 0 {
		timeout = DefaultReadyTimeout
	}
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	fail := func(err error) (*Embedded, error) {
		// Stop the server before Close: Close of a member that never became
		// ready otherwise waits forever for its client servers to start.
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("start embedded etcd %q in %s: %w", ecfg.Name, ecfg.Dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		return fail(err)
	case <-e.Server.StopNotify():
		return fail(errors.New("server stopped before it was ready"))
	case <-ctx.Done():
		return fail(context.Cause(ctx))
	case <-timer.C:
		return fail(fmt.Errorf("%w after %s (is a quorum of InitialCluster up?)", ErrNotReady, timeout))
	}
	return &Embedded{
		etcd:       e,
		client:     v3client.New(e.Server),
		clientURLs: boundURLs(ecfg.ListenClientUrls, e.Clients),
	}, nil
}

// Client returns an in-process client of this member: it calls the server
// directly, without a network connection. Do not close it; Close does.
func (e *Embedded) Client() *clientv3.Client { return e.client }

// ClientURLs returns the URLs the client listeners are bound to, with the
// actual port where a listen URL asked for port 0, sorted.
func (e *Embedded) ClientURLs() []string {
	return append([]string(nil), e.clientURLs...)
}

// Err returns a channel that receives errors that stop the member from
// serving (for the caller's errgroup). It is closed after Close.
func (e *Embedded) Err() <-chan error { return e.etcd.Err() }

// Stopped returns a channel that is closed when the etcd server stops, for
// example after Close or when the member is removed from the cluster.
func (e *Embedded) Stopped() <-chan struct{} { return e.etcd.Server.StopNotify() }

// RemovedFromCluster reports whether this member has applied its own
// removal from the etcd cluster (and so stops).
func (e *Embedded) RemovedFromCluster() bool {
	s := e.etcd.Server
	return !s.IsMemberExist(s.MemberID())
}

// Close stops the member. It first closes the in-process client, then
// stops etcd: client connections are closed (waiting up to the request
// timeout for requests in flight), the server stops, then peer listeners
// close. Close stores built on Client before calling it. Calling Close more
// than once is safe.
func (e *Embedded) Close() error {
	e.closeOnce.Do(func() {
		if err := e.client.Close(); err != nil && !errors.Is(err, context.Canceled) {
			e.closeErr = fmt.Errorf("close in-process etcd client: %w", err)
		}
		e.etcd.Close()
	})
	return e.closeErr
}

// zapLogger returns etcd's logger: warn level JSON to w, or nothing.
func zapLogger(w io.Writer) *zap.Logger {
	if w == nil {
		return zap.NewNop()
	}
	enc := zapcore.NewJSONEncoder(zap.NewProductionEncoderConfig())
	return zap.New(zapcore.NewCore(enc, zapcore.AddSync(w), zap.WarnLevel))
}

// boundURLs renders the listeners' actual addresses as URLs, taking each
// scheme from the listen URL it came from.
func boundURLs(listen []url.URL, ls []net.Listener) []string {
	out := make([]string, 0, len(ls))
	for _, l := range ls {
		addr := l.Addr()
		if addr.Network() == "unix" {
			scheme := "unix"
			for _, u := range listen {
				if u.Scheme == "unixs" && unixPath(u) == addr.String() {
					scheme = "unixs"
				}
			}
			out = append(out, scheme+"://"+addr.String())
			continue
		}
		_, port, _ := net.SplitHostPort(addr.String())
		scheme := ""
		for _, u := range listen {
			if u.Scheme != "http" && u.Scheme != "https" {
				continue
			}
			if u.Port() == port {
				scheme = u.Scheme
				break
			}
			if u.Port() == "0" && scheme == "" {
				scheme = u.Scheme
			}
		}
		if scheme == "" {
			scheme = "http"
		}
		out = append(out, scheme+"://"+addr.String())
	}
	sort.Strings(out)
	return out
}
