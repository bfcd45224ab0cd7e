package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/rs/zerolog"
	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api/server"
	"kat.dws.rip/kat/gitsync"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

// leaseTTLSeconds is the leader lease: a dead leader is replaced this fast.
const leaseTTLSeconds = 5

// shutdownGrace bounds how long in-flight API requests may take at shutdown.
const shutdownGrace = 10 * time.Second

// node is a running kat-agent: its identity, PKI and state store.
type node struct {
	dir     dataDir
	state   *nodeState
	log     zerolog.Logger
	ca      *pki.CA
	leaf    *pki.Leaf
	admin   string
	join    string
	st      store.StateStore
	repo    *resources.Repo
	embed   *store.Embedded
	opts    *initOptions
	closers []func() error
}

func runInit(ctx context.Context, o *initOptions) error {
	log := newLogger(o.logLevel, o.logFormat)
	n, err := openNode(ctx, o, log)
	if err != nil {
		return err
	}
	defer n.close()
	return n.run(ctx)
}

// openNode prepares everything up to a working state store: node state, PKI,
// tokens, etcd, and the cluster's records.
func openNode(ctx context.Context, o *initOptions, log zerolog.Logger) (n *node, err error) {
	d := dataDir(o.dataDir)
	st, err := loadNodeState(d)
	if err != nil {
		return nil, err
	}
	resumed := st != nil
	if st == nil {
		// Check cluster.kat before creating anything, so a refused
		// configuration leaves no trace.
		if st, err = newNodeState(o); err != nil {
			return nil, err
		}
	} else if o.configPath != "" {
		log.Info().Str("config", o.configPath).Msg("data directory already initialised: resuming; cluster.kat is fixed at the first init and is ignored")
	}
	st.applyFlags(o)
	if err := os.MkdirAll(string(d), 0o700); err != nil {
		return nil, fmt.Errorf("create data directory: %w", err)
	}
	n = &node{dir: d, state: st, log: log, opts: o}
	defer func() {
		if err != nil {
			n.close()
		}
	}()
	if err := n.ensurePKI(); err != nil {
		return nil, err
	}
	if n.admin, err = ensureToken(d.adminToken()); err != nil {
		return nil, err
	}
	if n.join, err = ensureToken(d.joinToken()); err != nil {
		return nil, err
	}
	if err := saveNodeState(d, st); err != nil {
		return nil, err
	}
	if err := n.openStore(ctx); err != nil {
		return nil, err
	}
	n.repo = resources.New(n.st)
	info, created, err := n.repo.InitCluster(ctx, resources.ClusterInit{
		UID: st.ClusterUID, Config: st.Cluster, AdminToken: n.admin, JoinToken: n.join,
	})
	if err != nil {
		return nil, err
	}
	if !created && info.UID != st.ClusterUID {
		return nil, fmt.Errorf("the state store belongs to cluster %s, but %s was initialised for cluster %s", info.UID, d, st.ClusterUID)
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
	return n, nil
}

func (n *node) ensurePKI() error {
	ca, created, err := pki.EnsureCA(pki.PathsIn(n.dir.pkiDir(), "ca"), "kat-"+n.state.Cluster.Metadata.Name+"-ca")
	if err != nil {
		return err
	}
	if created {
		n.log.Info().Msg("created cluster CA")
	}
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(n.state.AdvertiseAddress); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	leaf, issued, err := pki.EnsureLeaf(pki.PathsIn(n.dir.pkiDir(), "node"), ca, pki.LeafRequest{
		CommonName: n.state.NodeName, DNSNames: []string{n.state.NodeName, "localhost"}, IPs: ips,
	})
	if err != nil {
		return err
	}
	if issued {
		n.log.Info().Str("node", n.state.NodeName).Msg("issued node certificate")
	}
	n.ca, n.leaf = ca, leaf
	return nil
}

// openStore starts the embedded etcd, or dials the external one.
func (n *node) openStore(ctx context.Context) error {
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
	clientURLs := []string{"https://" + net.JoinHostPort(host, strconv.Itoa(int(spec.EtcdClientPort)))}
	if host != "127.0.0.1" {
		clientURLs = append(clientURLs, "https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(int(spec.EtcdClientPort))))
	}
	peerURL := "https://" + net.JoinHostPort(host, strconv.Itoa(int(spec.EtcdPeerPort)))
	nodePaths, caPaths := pki.PathsIn(n.dir.pkiDir(), "node"), pki.PathsIn(n.dir.pkiDir(), "ca")
	tlsFiles := &store.TLSFiles{CertFile: nodePaths.Cert, KeyFile: nodePaths.Key, TrustedCAFile: caPaths.Cert}
	e, err := store.StartEmbedded(ctx, store.EmbedConfig{
		Name: n.state.NodeName, DataDir: n.dir.etcdDir(),
		ListenClientURLs: clientURLs, AdvertiseClientURLs: clientURLs[:1],
		ListenPeerURLs: []string{peerURL}, AdvertisePeerURLs: []string{peerURL},
		ClientTLS: tlsFiles, PeerTLS: tlsFiles, LogOutput: etcdLog,
	})
	if err != nil {
		return fmt.Errorf("start embedded etcd: %w", err)
	}
	n.embed = e
	n.st = store.New(e.Client())
	n.log.Info().Strs("client_urls", clientURLs).Str("peer_url", peerURL).Msg("embedded etcd ready")
	return nil
}

func (n *node) dialExternal(ctx context.Context) error {
	tlsCfg, err := externalEtcdTLS(n.opts)
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

func (n *node) close() {
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

// run campaigns for leadership and serves as leader until ctx ends. When
// leadership is lost (the lease expired) it stops leading and campaigns again.
func (n *node) run(ctx context.Context) error {
	g, ctx := errgroup.WithContext(ctx)
	if n.embed != nil {
		g.Go(func() error {
			select {
			case err := <-n.embed.Err():
				return fmt.Errorf("embedded etcd failed: %w", err)
			case <-ctx.Done():
				return nil
			}
		})
	}
	g.Go(func() error { return n.runAgent(ctx) })
	g.Go(func() error {
		for ctx.Err() == nil {
			lctx, err := n.st.Campaign(ctx, n.state.NodeName, leaseTTLSeconds)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				n.log.Warn().Err(err).Msg("campaign for leadership failed; retrying")
				select {
				case <-time.After(time.Second):
				case <-ctx.Done():
				}
				continue
			}
			n.log.Info().Str("node", n.state.NodeName).Msg("elected leader")
			err = n.lead(lctx)
			if ctx.Err() != nil {
				rctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
				_ = n.st.Resign(rctx)
				cancel()
				return err
			}
			if err != nil {
				return err
			}
			n.log.Warn().Msg("lost leadership; campaigning again")
		}
		return nil
	})
	return g.Wait()
}

// lead performs the leader's duties until lctx ends.
func (n *node) lead(lctx context.Context) error {
	spec := n.state.Cluster.Spec
	apiURL := "https://" + net.JoinHostPort(n.state.AdvertiseAddress, strconv.Itoa(int(spec.APIPort)))
	now := time.Now().UTC()
	for _, ns := range []string{resources.NamespaceSystem, resources.NamespaceDefault} {
		if _, err := n.repo.EnsureNamespace(lctx, ns, nil); err != nil {
			return leaderErr(lctx, err)
		}
	}
	reg := resources.NodeRegistration{
		Name: n.state.NodeName, UID: n.state.NodeUID, AdvertiseAddress: n.state.AdvertiseAddress,
		APIPort: int(spec.APIPort), AgentPort: int(spec.AgentPort), JoinedAt: now,
		Labels: map[string]string{"kat.dws.rip/nodeName": n.state.NodeName},
	}
	if old, err := n.repo.GetNodeRegistration(lctx, reg.Name); err == nil {
		reg.JoinedAt = old.JoinedAt
	}
	if err := n.repo.PutNodeRegistration(lctx, reg); err != nil {
		return leaderErr(lctx, err)
	}
	if err := n.touchNodeStatus(lctx); err != nil {
		return leaderErr(lctx, err)
	}
	if err := n.repo.SetLeaderEndpoint(lctx, resources.LeaderEndpoint{Node: n.state.NodeName, APIURL: apiURL, Since: now}); err != nil {
		return leaderErr(lctx, err)
	}
	hash, err := n.repo.AdminTokenHash(lctx)
	if err != nil {
		return leaderErr(lctx, err)
	}
	gitops, err := n.gitops(lctx)
	if err != nil {
		return leaderErr(lctx, err)
	}
	apps := reconcile.NewAppSources(reconcile.AppSourcesConfig{
		Repo: n.repo, Interval: n.appPollInterval(), Auth: n.opts.agent.appAuth(), Logger: n.log.With().Str("component", "appsources").Logger(),
	})
	hooks, err := webhook.NewHandler(webhook.HandlerConfig{
		Secret: n.webhookSecret(), Dispatcher: webhook.Fanout(gitops, apps), Logger: n.log,
	})
	if err != nil {
		return err
	}
	agentTr, err := n.agentTransport()
	if err != nil {
		return err
	}
	srv, err := server.NewServer(server.ServerConfig{
		Repo: n.repo, AdminTokenHash: hash, GitOps: gitops, Webhooks: hooks, AgentTransport: agentTr,
		NodeLossTimeout: time.Duration(spec.NodeLossTimeoutSeconds) * time.Second,
		Logger:          n.log.With().Str("component", "api").Logger(),
	})
	if err != nil {
		return err
	}
	tlsCfg, err := pki.ServerTLSConfig(n.leaf, n.ca.Pool(), false)
	if err != nil {
		return err
	}
	tlsCfg.MinVersion = tls.VersionTLS12
	tlsCfg.ClientAuth = tls.VerifyClientCertIfGiven // agents report with their node certificate
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(int(spec.APIPort))))
	if err != nil {
		return fmt.Errorf("listen for the API on port %d: %w", spec.APIPort, err)
	}
	httpSrv := &http.Server{
		Handler: srv.Handler(), TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second,
		ErrorLog: nil, BaseContext: func(net.Listener) context.Context { return lctx },
	}
	if err := writeKatcallConfig(n.dir.katcallConfig(), katcallConfig{
		Server: apiURL, Token: n.admin, CertificateAuthorityData: string(n.ca.CertPEM),
	}); err != nil {
		ln.Close()
		return err
	}
	g, gctx := errgroup.WithContext(lctx)
	g.Go(func() error {
		n.log.Info().Str("url", apiURL).Str("katcall_config", n.dir.katcallConfig()).Msg("serving API")
		if err := httpSrv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve API: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		return httpSrv.Shutdown(sctx)
	})
	g.Go(func() error { return gitops.Run(gctx) })
	g.Go(func() error { return apps.Run(gctx) })
	// The heartbeat is the agent's (runAgent), posted to whichever node leads.
	g.Go(func() error {
		return reconcile.RunAssigner(gctx, reconcile.AssignerConfig{
			Repo: n.repo, Node: n.state.NodeName, Logger: n.log.With().Str("component", "assigner").Logger(),
		})
	})
	return g.Wait()
}

// gitops creates the source cluster.kat's spec.gitops names (once: later
// changes are made with katcall source set) and returns the Git sync the
// leader runs until it loses leadership.
func (n *node) gitops(lctx context.Context) (*gitsync.Manager, error) {
	if g := n.state.Cluster.Spec.GitOps; g != nil {
		spec := gitsync.Defaulted(gitsync.SpecFromGitOps(g))
		if err := gitsync.ValidateSpec(spec); err != nil {
			// cluster.kat was checked at init; a source it cannot make is
			// reported, and katcall source set can still add one.
			n.log.Error().Str("error", err.Error()).Msg("cluster.kat spec.gitops does not make a valid source; not following it")
			return gitsync.NewManager(gitsync.Config{Repo: n.repo, DataDir: n.dir.path("gitsync"), Logger: n.log}), nil
		}
		created, err := n.repo.CreateSourceSpec(lctx, spec)
		if err != nil {
			return nil, err
		}
		if created {
			n.log.Info().Str("source", spec.Name).Str("url", gitsync.RedactURL(spec.URL)).Msg("created the Git source of cluster.kat")
		}
	}
	return gitsync.NewManager(gitsync.Config{Repo: n.repo, DataDir: n.dir.path("gitsync"), Logger: n.log}), nil
}

// appPollInterval is how often the leader resolves app repositories without
// a webhook: --app-poll-interval, else cluster.kat's gitops poll interval,
// else gitsync's default.
func (n *node) appPollInterval() time.Duration {
	if n.opts.agent.appPollInterval > 0 {
		return n.opts.agent.appPollInterval
	}
	if g := n.state.Cluster.Spec.GitOps; g != nil && g.PollIntervalSeconds > 0 {
		return time.Duration(g.PollIntervalSeconds) * time.Second
	}
	return gitsync.DefaultIntervalSeconds * time.Second
}

// webhookSecret reads cluster.kat's spec.gitops.webhookSecretFile on every
// webhook; without one every webhook is refused.
func (n *node) webhookSecret() func() ([]byte, error) {
	if g := n.state.Cluster.Spec.GitOps; g != nil && g.WebhookSecretFile != "" {
		return webhook.SecretFile(g.WebhookSecretFile)
	}
	return func() ([]byte, error) {
		return nil, errors.New("webhooks are disabled: cluster.kat has no spec.gitops.webhookSecretFile")
	}
}

// leaderErr drops errors caused by the leadership context ending.
func leaderErr(lctx context.Context, err error) error {
	if lctx.Err() != nil {
		return nil
	}
	return err
}

func newLogger(level, format string) zerolog.Logger {
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	var w io.Writer = os.Stderr
	if format == "console" || (format == "auto" && isTerminal(os.Stderr)) {
		w = zerolog.ConsoleWriter{Out: os.Stderr, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Str("component", "kat-agent").Logger()
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}

// externalEtcdTLS builds the client TLS configuration for an external etcd
// from the --etcd-* flags; nil when none is given.
func externalEtcdTLS(o *initOptions) (*tls.Config, error) {
	if o.etcdCAFile == "" && o.etcdCertFile == "" {
		return nil, nil
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if o.etcdCAFile != "" {
		b, err := os.ReadFile(o.etcdCAFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-cafile: %w", err)
		}
		if cfg.RootCAs, err = pki.CertPool(b); err != nil {
			return nil, fmt.Errorf("--etcd-cafile %s: %w", o.etcdCAFile, err)
		}
	}
	if o.etcdCertFile != "" {
		cert, err := tls.LoadX509KeyPair(o.etcdCertFile, o.etcdKeyFile)
		if err != nil {
			return nil, fmt.Errorf("--etcd-certfile/--etcd-keyfile: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	return cfg, nil
}
