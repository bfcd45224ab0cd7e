package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/gitsync"
	"kat.dws.rip/kat/gitx"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/reconcile/leader"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/webhook"
)

// leaderTerm prepares a term of leadership: the cluster's base records, this
// node's registration and the leader endpoint, the API listener and
// katcall.yaml; it returns the leader's loops. Everything it starts stops
// when lctx ends.
func (n *Node) leaderTerm(lctx context.Context) ([]reconcile.Loop, error) {
	spec := n.state.Cluster.Spec
	apiURL := n.apiURL()
	if err := n.registerSelf(lctx, apiURL); err != nil {
		return nil, err
	}
	hash, err := n.repo.AdminTokenHash(lctx)
	if err != nil {
		return nil, err
	}
	if err := n.syncJoinToken(lctx); err != nil {
		n.log.Warn().Err(err).Msg("join token file not brought up to date")
	}
	n.warnMissingClusterFiles("as it starts to lead")
	if g := spec.GitOps; g != nil {
		created, err := gitsync.EnsureClusterSource(lctx, n.repo, g)
		switch {
		case err != nil && lctx.Err() == nil:
			// cluster.kat was checked at init; katcall source set can
			// still add a source.
			n.log.Error().Err(err).Msg("not following cluster.kat's config repo")
		case created:
			n.log.Info().Str("source", gitsync.ClusterSourceName).Str("url", gitx.RedactURL(g.Repository)).Msg("created the Git source of cluster.kat")
		}
	}
	// One index of the desired state serves the Git sources and the
	// leader's loops.
	desired := resources.NewDesiredIndex(n.repo.Store())
	keys := n.secretKeys()
	gitops := gitsync.NewManager(gitsync.Config{Repo: n.repo, DataDir: n.dir.path("gitsync"), Logger: n.log, Desired: desired, Secrets: keys})
	lossTimeout := time.Duration(spec.NodeLossTimeoutSeconds) * time.Second
	acme, err := n.acmeConfig()
	if err != nil {
		n.log.Error().Err(err).Msg("ACME is off this term")
	}
	loops, err := leader.New(leader.Config{
		Sealer: n.ca, IngressCertDir: n.ingressCertDir(), ACME: acme,
		Repo: n.repo, NodeLossTimeout: lossTimeout, AppInterval: n.appPollInterval(), AppAuth: n.opts.Agent.AppAuth, Logger: n.log,
		Desired: desired, ClusterDomain: spec.ClusterDomain, DrainDelay: n.opts.DrainDelay,
		CollectAfter: time.Duration(spec.NodeCollectAfterSeconds) * time.Second, CollectNode: n.collectNode,
		HeldSlots: n.heldSlots,
	})
	if err != nil {
		return nil, err
	}
	secret, secretLoops := n.webhookSecret()
	backup, backupLoops := n.backups()
	hooks, err := webhook.NewHandler(webhook.HandlerConfig{
		Secret: secret, Dispatcher: webhook.Fanout(gitops, loops.AppSources()), Logger: n.log,
	})
	if err != nil {
		return nil, err
	}
	agentTr, err := n.agentTransport()
	if err != nil {
		return nil, err
	}
	auditLog := n.log.With().Str("component", "audit").Logger()
	srv, err := apiserver.New(apiserver.Config{
		Repo: n.repo, AdminTokenHash: hash, GitOps: gitops, Webhooks: hooks, AgentTransport: agentTr,
		CACertPEM: n.ca.CertPEM, Join: n.admit, Secrets: n.apiSecretKeys(keys), RotateJoinToken: n.rotateJoinToken, ForgetNode: n.ForgetNode,
		SignMetricsCert: n.signMetricsCert,
		NodeOverlay:     n.recordOverlay,
		Backup:          backup,
		Metrics:         metrics.Handler(),
		NodeLossTimeout: lossTimeout, TermStart: loops.TermStart(), Forwarder: loops.IsMemberAddress,
		WorkloadInstances: loops.WorkloadInstances,
		Logger:            n.log.With().Str("component", "api").Logger(), AuditLogger: &auditLog,
	})
	if err != nil {
		return nil, err
	}
	// The node's API listener (apiFront) serves the term's handler from
	// now on, before katcall.yaml says where the API is.
	release := n.front.lead(lctx, srv.Handler())
	if err := n.writeOwnKatcallConfig(lctx); err != nil {
		release()
		return nil, err
	}
	n.log.Info().Str("url", apiURL).Str("katcall_config", n.dir.katcallConfig()).Msg("serving API")
	return append([]reconcile.Loop{
		{Name: "api", Run: func(ctx context.Context) error {
			<-ctx.Done()
			release()
			return nil
		}},
		n.watchLease(n.leaseTTL(lctx)),
		{Name: "desired", Run: desired.Run},
		{Name: "gitsync", Run: gitops.Run},
	}, append(append(secretLoops, backupLoops...), loops.Loops()...)...), nil
}

// registerSelf ensures the cluster's base namespaces, registers this node,
// marks it live at once (its agent's next heartbeat brings its instances)
// and records the leader endpoint agents and katcall follow.
func (n *Node) registerSelf(ctx context.Context, apiURL string) error {
	spec := n.state.Cluster.Spec
	now := time.Now().UTC()
	for _, ns := range []string{resources.NamespaceSystem, resources.NamespaceDefault} {
		if _, err := n.repo.EnsureNamespace(ctx, ns, nil); err != nil {
			return err
		}
	}
	reg := api.NodeRegistration{
		Name: n.state.NodeName, UID: n.state.NodeUID, AdvertiseAddress: n.state.AdvertiseAddress,
		APIPort: spec.APIPort, AgentPort: spec.AgentPort, JoinedAt: now,
		Labels: nodeLabels(n.state.NodeName, n.state.Labels), EtcdMember: true,
	}
	if err := n.repo.RegisterSelf(ctx, reg); err != nil {
		return err
	}
	st, err := n.repo.GetNodeStatus(ctx, n.state.NodeName)
	if err != nil && !errors.Is(err, resources.ErrNotFound) {
		return err
	}
	if st == nil {
		st = &api.NodeStatus{}
	}
	res, err := agent.DetectResources()
	if err != nil {
		return err
	}
	st.NodeName, st.NodeUID, st.Timestamp, st.Resources = n.state.NodeName, n.state.NodeUID, now.Unix(), res
	if err := n.repo.PutNodeStatus(ctx, *st); err != nil {
		return err
	}
	if err := n.ensureNodeNetwork(ctx, n.state.NodeName, n.state.AdvertiseAddress, overlayReport(n.state, n.wgKey)); err != nil {
		return err
	}
	return n.repo.SetLeaderEndpoint(ctx, api.Leader{Node: n.state.NodeName, APIURL: apiURL, Since: now})
}

// memberServers lists the API URLs of the etcd members other than the one
// at self, for katcall.yaml.
func (n *Node) memberServers(ctx context.Context, self string) ([]string, error) {
	nodes, err := n.repo.ListNodes(ctx)
	if err != nil {
		return nil, fmt.Errorf("list the members for katcall.yaml: %w", err)
	}
	var out []string
	for _, nd := range nodes {
		if u := nd.Registration.APIURL(); nd.Registration.EtcdMember && u != "" && u != self {
			out = append(out, u)
		}
	}
	return out, nil
}

// apiURL is the URL of this node's API.
func (n *Node) apiURL() string {
	return "https://" + net.JoinHostPort(n.state.AdvertiseAddress, strconv.Itoa(n.state.Cluster.Spec.APIPort))
}

// writeOwnKatcallConfig writes DATA_DIR/katcall.yaml: this member's API
// first (while it does not lead it forwards to the leader), then every
// other member's known now. The leader writes it at the start of each
// term and when a member joins, a member when it joins.
func (n *Node) writeOwnKatcallConfig(ctx context.Context) error {
	self := n.apiURL()
	others, err := n.memberServers(ctx, self)
	if err != nil {
		return err
	}
	return writeKatcallConfig(n.dir.katcallConfig(), katcallConfig{
		Server: self, Servers: others, Token: n.admin, CertificateAuthorityData: string(n.ca.CertPEM),
	})
}

// appPollInterval is how often the leader resolves app repositories without
// a webhook: --app-poll-interval, else cluster.kat's gitops poll interval,
// else gitsync's default.
func (n *Node) appPollInterval() time.Duration {
	if n.opts.Agent.AppPollInterval > 0 {
		return n.opts.Agent.AppPollInterval
	}
	if g := n.state.Cluster.Spec.GitOps; g != nil && g.PollIntervalSeconds > 0 {
		return time.Duration(g.PollIntervalSeconds) * time.Second
	}
	return gitsync.DefaultIntervalSeconds * time.Second
}

// webhookSecret returns the Secret func of the webhook handler and the
// loop that watches cluster.kat's spec.gitops.webhookSecretFile: the file
// is reloaded when it changes (webhook.WatchSecretFile), keeping the last
// good secret when it becomes unreadable or empty. Without the file every
// webhook is refused, and there is no loop.
func (n *Node) webhookSecret() (func() ([]byte, error), []reconcile.Loop) {
	if g := n.state.Cluster.Spec.GitOps; g != nil && g.WebhookSecretFile != "" {
		v := webhook.WatchSecretFile(g.WebhookSecretFile, n.log.With().Str("component", "webhook").Logger())
		return v.Get, []reconcile.Loop{{Name: "webhook-secret", Run: v.Run}}
	}
	return func() ([]byte, error) {
		return nil, errors.New("webhooks are disabled: cluster.kat has no spec.gitops.webhookSecretFile")
	}, nil
}
