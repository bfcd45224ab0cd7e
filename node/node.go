package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/rs/zerolog"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
)

// Node is an opened kat-agent: its identity, PKI and state store. Run runs
// it; Close releases the store.
type Node struct {
	dir   dataDir
	state *nodeState
	opts  Options
	log   zerolog.Logger
	ca    *pki.CA
	leaf  *pki.Leaf
	admin string
	join  string
	// wgKey is the node's WireGuard private key (DATA_DIR/wg_private.key).
	wgKey wgtypes.Key
	// joinMu serialises join token rotations, so join.token and the hash
	// in etcd always name the same secret.
	joinMu sync.Mutex
	st     store.StateStore
	repo   *resources.Repo
	embed  *store.Embedded
	// etcd is the administrator's client of the embedded etcd (the same
	// store as st); nil on a worker and with an external etcd.
	etcd *store.Etcd
	// front serves the API on a node that may lead (Run sets it).
	front *apiFront
	// overlayDev is the open overlay device, nil while there is none
	// (runOverlay sets it); the heartbeat reads its peers.
	overlayDev atomic.Pointer[netstack.Device]
	// depart is the node's departure for good (runAgent sets it); once it
	// happened Run returns its error. leftQuorum is set while the departing
	// member leaves the etcd quorum: its embedded etcd stops then.
	depart     *departure
	leftQuorum atomic.Bool
	// stopCampaign ends a member's campaign for leadership, resigning
	// it when held; campaignDone is closed once the campaign returned.
	// Run sets both before it starts anything; nil on a worker.
	stopCampaign context.CancelFunc
	campaignDone chan struct{}
	// closers run in reverse order after the store closed.
	closers []func() error
	// worker is, on the control plane of a detached node, the worker's
	// data directory: its build clones, secrets and ingress files stay
	// where its containers use them. Empty otherwise.
	worker dataDir
	// leftRunning are, on the control plane of a detached node, the
	// cluster's Job instances the node ran as it detached
	// (api.Detached.LeftRunning): its agent leaves their containers alone.
	leftRunning []string
	// heldSlots are their user-namespace slots (api.Detached.HeldSlots),
	// which the plane's leader gives to no workload.
	heldSlots []int
}

// hostFiles is the directory of the files the node's containers use:
// build clones, secrets, ingress.
func (n *Node) hostFiles() dataDir {
	if n.worker != "" {
		return n.worker
	}
	return n.dir
}

// Open prepares everything up to a working state store: the node state, the
// cluster CA and node certificate, the tokens, etcd (started embedded, or
// dialled), and the cluster's records in it. The first Open of a data
// directory creates the cluster from cluster.kat; a later one resumes it. A
// refused cluster.kat or option leaves nothing behind.
func Open(ctx context.Context, o Options, log zerolog.Logger) (n *Node, err error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	d := dataDir(o.DataDir)
	st, err := loadNodeState(d)
	if err != nil {
		return nil, err
	}
	if st != nil && st.LeftQuorum {
		return nil, fmt.Errorf("%s holds node %s, which departed and left the etcd quorum: to bring the node back, join it again from an empty data directory (kat-agent join --etcd-peer)", d, st.NodeName)
	}
	joined := false
	switch {
	case o.Join:
		joined = st == nil || !st.Joined
		if st, err = joinOrResume(ctx, &o, d, st, log); err != nil {
			return nil, err
		}
		if st.Role == roleWorker {
			return openWorker(ctx, o, d, st, log)
		}
	case st != nil && st.Role != "":
		return nil, fmt.Errorf("%s holds a node that joined a cluster: run kat-agent join --data-dir %s to resume it", d, d)
	}
	resumed := st != nil
	if st == nil {
		// Check cluster.kat before creating anything, so a refused
		// configuration leaves no trace.
		if st, err = newNodeState(&o); err != nil {
			return nil, err
		}
	} else if o.ConfigPath != "" {
		log.Info().Str("config", o.ConfigPath).Msg("data directory already initialised: resuming; cluster.kat is fixed at the first init and is ignored")
	}
	st.applyOptions(&o)
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	n = &Node{dir: d, state: st, log: log, opts: o}
	// An error return sets n to nil: close what was opened through opened.
	opened := n
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	if err := n.ensurePKI(); err != nil {
		return nil, err
	}
	if n.wgKey, err = netstack.LoadOrCreateKey(d.wgKey()); err != nil {
		return nil, err
	}
	if n.admin, err = ensureToken(d.adminToken()); err != nil {
		return nil, err
	}
	if n.join, err = ensureJoinToken(d.joinToken(), n.ca); err != nil {
		return nil, err
	}
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	if err := n.openStore(ctx); err != nil {
		return nil, err
	}
	n.repo = resources.New(n.st, n.repoOptions()...)
	if n.etcd != nil {
		if err := n.ensureAccess(ctx); err != nil {
			return nil, err
		}
	}
	info, created, err := n.repo.InitCluster(ctx, resources.ClusterInit{
		UID: st.ClusterUID, Config: st.Cluster, AdminToken: n.admin, JoinToken: n.join,
	})
	if err != nil {
		return nil, err
	}
	if !created && info.UID != st.ClusterUID {
		return nil, fmt.Errorf("the state store belongs to cluster %s, but %s was initialised for cluster %s", info.UID, d, st.ClusterUID)
	}
	if st.ResetTokens {
		if err := n.takeOverTokens(ctx); err != nil {
			return nil, err
		}
	}
	hash, err := n.repo.AdminTokenHash(ctx)
	if err != nil {
		return nil, err
	}
	if !resources.TokenMatches(hash, n.admin) {
		return nil, fmt.Errorf("%s does not hold this cluster's admin token", d.adminToken())
	}
	n.log.Info().Str("cluster_uid", info.UID).Str("node", st.NodeName).Bool("resumed", resumed).Bool("created", created).
		Msg("cluster state ready")
	if joined {
		if err := n.writeOwnKatcallConfig(ctx); err != nil {
			return nil, err
		}
	}
	return n, nil
}

// joinOrResume returns the state of a node that joins, or has joined, a
// cluster: it asks the leader to admit it unless it was admitted before
// (then no token is needed).
func joinOrResume(ctx context.Context, o *Options, d dataDir, st *nodeState, log zerolog.Logger) (_ *nodeState, err error) {
	if st != nil && st.Role == "" {
		return nil, fmt.Errorf("%s holds a node that created its cluster (kat-agent init): it cannot join another; use a new --data-dir", d)
	}
	if (st == nil || !st.Joined) && o.LeaderAPI == "" {
		return nil, errors.New("--leader-api: required on the first join of a data directory (HOST:PORT of the leader's API)")
	}
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	if st == nil || !st.Joined {
		if st, err = joinCluster(ctx, o, d, st); err != nil {
			return nil, err
		}
		log.Info().Str("leader_api", o.LeaderAPI).Str("node", st.NodeName).Str("cluster_uid", st.ClusterUID).
			Bool("etcd_member", st.Role == roleMember).Msg("joined the cluster")
		return st, nil
	}
	if o.LeaderAPI != "" || o.TokenFile != "" {
		log.Info().Msg("data directory has joined its cluster already: resuming; --leader-api and --token-file are not needed")
	}
	if o.NodeName != "" && o.NodeName != st.NodeName {
		return nil, fmt.Errorf("--node-name: %s joined as node %q; its name cannot change", d, st.NodeName)
	}
	if o.ParentClusterName != "" && o.ParentClusterName != st.Cluster.Metadata.Name {
		return nil, fmt.Errorf("--parent-cluster-name: %s joined cluster %q, not %q", d, st.Cluster.Metadata.Name, o.ParentClusterName)
	}
	if o.EtcdPeer && st.Role == roleWorker {
		return nil, fmt.Errorf("--etcd-peer: %s joined as a worker, which cannot become an etcd member: delete the node (katcall delete node %s) and join with a new --data-dir", d, st.NodeName)
	}
	st.applyOptions(o)
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	return st, nil
}

// openWorker opens a worker that joined its cluster: it dials the
// cluster's etcd with its certificate.
func openWorker(ctx context.Context, o Options, d dataDir, st *nodeState, log zerolog.Logger) (n *Node, err error) {
	n = &Node{dir: d, state: st, log: log, opts: o}
	// An error return sets n to nil: close what was opened through opened.
	opened := n
	defer func() {
		if err != nil {
			opened.Close()
		}
	}()
	if err := n.loadWorkerPKI(); err != nil {
		return nil, err
	}
	if n.wgKey, err = netstack.LoadOrCreateKey(d.wgKey()); err != nil {
		return nil, err
	}
	tlsCfg, err := pki.ClientTLSConfig(n.ca.Pool(), n.leaf)
	if err != nil {
		return nil, err
	}
	// Every member's client URL, kept current, so that a dead member does
	// not cut the worker off.
	dial := store.DialConfig{Endpoints: st.EtcdEndpoints, TLS: tlsCfg, AutoSyncInterval: memberSyncInterval}
	if n.st, err = store.Dial(ctx, dial); err != nil {
		return nil, fmt.Errorf("connect to the cluster's etcd at %s: %w", strings.Join(st.EtcdEndpoints, ","), err)
	}
	n.repo = resources.New(n.st, n.repoOptions()...)
	info, err := n.repo.ClusterInfo(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the cluster's records: %w", err)
	}
	if info.UID != st.ClusterUID {
		return nil, fmt.Errorf("the etcd at %s belongs to cluster %s, but %s joined cluster %s", strings.Join(st.EtcdEndpoints, ","), info.UID, d, st.ClusterUID)
	}
	log.Info().Str("cluster_uid", info.UID).Str("node", st.NodeName).Msg("worker ready")
	return n, nil
}

// Name is the node's name.
func (n *Node) Name() string { return n.state.NodeName }

// Repo is the cluster state.
func (n *Node) Repo() *resources.Repo { return n.repo }

// KatcallConfigPath is where the leader writes katcall's configuration.
func (n *Node) KatcallConfigPath() string { return n.dir.katcallConfig() }

// openStore starts the embedded etcd, or dials the external one.
func (n *Node) openStore(ctx context.Context) error {
	if len(n.state.EtcdEndpoints) > 0 {
		return n.dialExternal(ctx)
	}
	if err := os.MkdirAll(n.dir.logsDir(), 0o700); err != nil {
		return fmt.Errorf("create log directory: %w", err)
	}
	etcdLog, err := os.OpenFile(n.dir.path("logs", "etcd.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("open etcd log: %w", err)
	}
	n.closers = append(n.closers, etcdLog.Close)
	spec := n.state.Cluster.Spec
	host := n.state.AdvertiseAddress
	clientURLs := []string{"https://" + net.JoinHostPort(host, strconv.Itoa(spec.EtcdClientPort))}
	if host != "127.0.0.1" {
		clientURLs = append(clientURLs, "https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(spec.EtcdClientPort)))
	}
	peerURL := "https://" + net.JoinHostPort(host, strconv.Itoa(spec.EtcdPeerPort))
	nodePaths, caPaths := pki.PathsIn(n.dir.pkiDir(), "node"), pki.PathsIn(n.dir.pkiDir(), "ca")
	tlsFiles := &store.TLSFiles{CertFile: nodePaths.Cert, KeyFile: nodePaths.Key, TrustedCAFile: caPaths.Cert}
	peerTLS, err := n.peerTLS()
	if err != nil {
		return err
	}
	cfg := store.EmbedConfig{
		Name: n.state.NodeName, DataDir: n.dir.etcdDir(),
		ListenClientURLs: clientURLs, AdvertiseClientURLs: clientURLs[:1],
		ListenPeerURLs: []string{peerURL}, AdvertisePeerURLs: []string{peerURL},
		ClientTLS: tlsFiles, PeerTLS: peerTLS, LogOutput: etcdLog,
	}
	if n.state.Cluster.Spec.Members() > 1 {
		cfg.ElectionMs = quorumElectionMs
	}
	if n.state.InitialCluster != "" {
		// A member that joined: its first start joins the existing
		// cluster; later ones read the membership from its data.
		cfg.InitialCluster, cfg.ClusterState = n.state.InitialCluster, "existing"
	}
	e, err := store.StartEmbedded(ctx, cfg)
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	n.embed = e
	if n.state.Role == roleMember && !n.state.Promoted {
		if err := n.promoteSelf(ctx); err != nil {
			return err
		}
	}
	// etcd authentication is on (ensureAccess), so the in-process client,
	// which carries no user, cannot be used.
	if n.etcd, err = n.rootClient(ctx); err != nil {
		return err
	}
	n.st = n.etcd
	n.log.Info().Strs("client_urls", clientURLs).Str("peer_url", peerURL).Msg("embedded etcd ready")
	return nil
}

func (n *Node) dialExternal(ctx context.Context) error {
	tlsCfg, err := externalEtcdTLS(&n.opts)
	if err != nil {
		return err
	}
	st, err := store.Dial(ctx, store.DialConfig{Endpoints: n.state.EtcdEndpoints, TLS: tlsCfg})
	if err != nil {
		return fmt.Errorf("connect to external etcd: %w", err)
	}
	n.st = st
	return nil
}

// Close releases the state store: the client first, then the embedded etcd,
// then the files they wrote to. Containers keep running.
func (n *Node) Close() {
	if n.st != nil {
		if err := n.st.Close(); err != nil {
			n.log.Warn().Err(err).Msg("close state store")
		}
	}
	if n.embed != nil {
		if err := n.embed.Close(); err != nil {
			n.log.Warn().Err(err).Msg("stop embedded etcd")
		}
	}
	for i := len(n.closers) - 1; i >= 0; i-- {
		_ = n.closers[i]()
	}
}

// externalEtcdTLS builds the client TLS configuration for an external etcd
// from the --etcd-* options; nil when none is given.
func externalEtcdTLS(o *Options) (*tls.Config, error) {
	if o.EtcdCAFile == "" && o.EtcdCertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.EtcdCAFile != "" {
		b, err := os.ReadFile(o.EtcdCAFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cafile: %w", err)
		}
		if cfg.RootCAs, err = pki.CertPool(b); err != nil {
			return nil, fmt.Errorf("--etcd-cafile %s: %w", o.EtcdCAFile, err)
		}
	}
	if o.EtcdCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.EtcdCertFile, o.EtcdKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-certfile/--etcd-keyfile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}

// repoOptions are the options of the node's resources.Repo.
func (n *Node) repoOptions() []resources.Option {
	if n.opts.ArchiveKeep > 0 {
		return []resources.Option{resources.WithArchiveKeep(n.opts.ArchiveKeep)}
	}
	return nil
}
