package node

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"
	"time"

	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/internal/metrics"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/reconcile/agent"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// runAgent runs the node's side: the local reconcile loop, the agent API on
// the agent port and the heartbeat to the leader. Containers keep running
// when it returns.
// onAgent, when not nil, is given the agent once it is made.
func (n *Node) runAgent(ctx context.Context, onAgent func(*agent.Agent)) error {
	o := n.opts.Agent
	spec := n.state.Cluster.Spec
	started := time.Now().UTC()
	log := n.log.With().Str("component", "agent").Logger()
	rt := runtime.NewPodman(runtime.PodmanConfig{Binary: o.Podman, Root: o.PodmanRoot, RunRoot: o.PodmanRunRoot,
		NetworkConfigDir: o.PodmanNetworkConfigDir, TmpDir: o.PodmanTmpDir,
		OnNotice: func(n runtime.Notice) {
			ev := log.Info()
			if n.Err != nil {
				ev = log.Warn().Err(n.Err)
			}
			ev.Str("container", n.Container).Int("count", n.Count).Msg(n.What)
		}})
	defer func() { // last: stops Podman's REST service; the containers keep running
		if err := rt.Close(); err != nil {
			log.Warn().Err(err).Msg("stop podman's service")
		}
	}()
	ids, idErr := runtime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	var idRange *runtime.SubIDRange
	if idErr != nil {
		log.Warn().Err(idErr).Msg("no sub-id range for user containers: no container can be created and nothing can be built; run scripts/install-prereqs.sh and restart the agent")
	} else {
		idRange = &ids
		log.Info().Int64("start", ids.Start).Int64("count", ids.Count).Msg("workload user namespaces from the containers sub-id range")
	}
	volumes := o.VolumeBasePath
	if volumes == "" {
		volumes = spec.VolumeBasePath
	}
	buildDir := o.BuildDir
	if buildDir == "" {
		buildDir = n.hostFiles().path("builds")
	}
	facts := n.factsRoad()
	builder, err := build.New(build.Config{
		Node: n.state.NodeName, WorkDir: buildDir, Podman: rt, Records: facts,
		Timeout: o.BuildTimeout, AuthFile: o.RegistryAuthFile, InsecureRegistries: o.InsecureRegistries,
		MaxParallel: o.MaxConcurrentBuilds, KeepImages: o.KeepImages, SubIDs: idRange, Logger: n.log.With().Str("component", "build").Logger(),
	})
	if err != nil {
		return err
	}
	defer builder.Close() // after every goroutine below has ended: stops builds still under way
	secrets, err := n.secretsLayout()
	if err != nil {
		return err
	}
	beat := make(chan struct{}, 1)
	gpus := agent.DetectGPUs()
	link := agent.NewLeaderLink(n.state.NodeName, n.repo, n.ca.CertPEM, n.leaf)
	usage := agent.NewUsageSampler()
	ag, err := agent.NewAgent(agent.AgentConfig{
		Repo: n.repo, Node: n.state.NodeName, ClusterUID: n.state.ClusterUID, Runtime: rt, Facts: facts,
		MaxConcurrentPulls: o.MaxConcurrentPulls, Builder: builder,
		BuildAuth: o.AppAuth, MaxConcurrentSteps: o.MaxConcurrentSteps,
		HostPorts: o.HostPorts, NetworkName: o.PodmanNetwork,
		BuildSpec: agent.WithGPUs(agent.NewSpecBuilderWithSecrets(n.state.NodeName, volumes, idRange, secrets), gpus), CheckHost: rt.CheckHost,
		Networks: rt, ClusterDomain: spec.ClusterDomain, LogMaxSize: spec.ContainerLogMaxBytes(),
		IngressDir: n.hostFiles().path("ingress"),
		Secrets:    link, IngressCertificates: link,
		SecretsDir: secrets.Dir, SecretsMount: agent.SecretsTmpfs,
		OnChange: func() { reconcile.Poke(beat) },
		Leave:    func(id string) bool { return slices.Contains(n.leftRunning, id) },
		Logger:   log,
	})
	if err != nil {
		return err
	}
	if onAgent != nil {
		onAgent(ag)
	}
	srv, ln, agentTLS, err := n.agentServer(ag, rt)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ag.Run(gctx) })
	g.Go(func() error { return n.runOverlay(gctx, ag.WaitNetwork) })
	g.Go(func() error { return agentTLS.Run(gctx) })
	g.Go(func() error { return n.runDNS(gctx) })
	g.Go(func() error {
		log.Info().Str("addr", ln.Addr().String()).Msg("serving agent API")
		return serveTLS(gctx, srv, ln, "agent API")
	})
	g.Go(func() error {
		return agent.RunHeartbeat(gctx, agent.HeartbeatConfig{
			Node: n.state.NodeName, NodeUID: n.state.NodeUID, Facts: facts, Wake: beat, Ready: ag.Seeded(),
			Overlay: overlayReport(n.state, n.wgKey), GPUs: func() []api.GPU { return gpus },
			Instances: ag.Instances, Conditions: ag.Conditions, Ingress: ag.IngressStatus,
			Usage: func() (*api.NodeUsage, error) {
				u, err := usage.Sample(ag.Running())
				if err == nil {
					u.OverlayPeers = n.overlayPeers()
				}
				return u, err
			},
			Interval: time.Duration(spec.AgentTickSeconds) * time.Second, StartedAt: started,
			Logger: n.log.With().Str("component", "heartbeat").Logger(),
		})
	})
	n.depart = newDeparture()
	g.Go(func() error { return n.serveControl(gctx, n.depart) })
	g.Go(func() error {
		return n.runDeparture(gctx, n.depart, agent.DepartConfig{Node: n.state.NodeName, Facts: facts, Repo: n.repo,
			StartedAt: started, Leftovers: ag.Leftovers})
	})
	return g.Wait()
}

// factsRoad is the one road of this node's facts (its status, build
// records and events), chosen by its role: a member (or the node that
// created the cluster), whose etcd user may write, records them itself
// with the code the leader's API records a worker's with; a worker, whose
// etcd user may only read (resources.WorkerGrants), sends them to the API
// of whichever node leads.
func (n *Node) factsRoad() agent.Facts {
	if n.state.Role == roleWorker {
		return agent.NewLeaderLink(n.state.NodeName, n.repo, n.ca.CertPEM, n.leaf)
	}
	return resources.NewNodeFacts(n.repo, n.recordOverlay)
}

// agentServer listens on the agent port with mutual TLS: only holders of a
// certificate of the cluster CA may call it. The caller runs the returned
// ServerTLS, which reloads the certificate files as they change.
func (n *Node) agentServer(ag *agent.Agent, rt *runtime.Podman) (*http.Server, net.Listener, *pki.ServerTLS, error) {
	agentTLS, err := n.serverTLS(tls.RequireAndVerifyClientCert, tls.VersionTLS13, "agent-api")
	if err != nil {
		return nil, nil, nil, err
	}
	port := n.state.Cluster.Spec.AgentPort
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, nil, nil, fmt.Errorf("listen for the agent API on port %d: %w", port, err)
	}
	h := apiserver.AgentHandler(apiserver.AgentConfig{
		Logs: func(ctx context.Context, id string, opts api.LogOptions, w io.Writer) error {
			err := ag.Logs(ctx, id, opts, w)
			switch {
			case errors.Is(err, agent.ErrUnknownInstance):
				return fmt.Errorf("%w: %w", apiserver.ErrUnknownInstance, err)
			case errors.Is(err, agent.ErrNoPreviousRun):
				return fmt.Errorf("%w: %w", apiserver.ErrNoPreviousRun, err)
			}
			return err
		},
		Exec: func(_ context.Context, id string) (apiserver.ExecFunc, error) {
			cid, err := ag.ContainerOf(id)
			if err != nil {
				return nil, fmt.Errorf("%w: %w", apiserver.ErrUnknownInstance, err)
			}
			return func(ctx context.Context, cmd []string, eio runtime.ExecIO) (int, error) {
				return rt.ExecInteractive(ctx, cid, cmd, eio)
			}, nil
		},
		BuildLog: func(_ context.Context, ns, name, commit string, w io.Writer) error {
			err := ag.BuildLog(ns, name, commit, w)
			if errors.Is(err, build.ErrLogNotFound) || errors.Is(err, build.ErrInvalid) || errors.Is(err, agent.ErrNoBuilder) {
				return fmt.Errorf("%w: %w", apiserver.ErrUnknownBuild, err)
			}
			return err
		},
		Metrics: metrics.Handler(),
		Logger:  n.log.With().Str("component", "agent-api").Logger(),
	})
	return &http.Server{Handler: h, TLSConfig: agentTLS.Config(), ReadHeaderTimeout: 10 * time.Second}, ln, agentTLS, nil
}

// serverTLS is the TLS configuration of one of the node's servers: the
// node certificate and key (DATA_DIR/pki/node.crt and node.key) and the
// cluster CA bundle (pki/ca.crt) for client certificates, reloaded when the
// files change. component names the server in logs.
func (n *Node) serverTLS(clientAuth tls.ClientAuthType, minVersion uint16, component string) (*pki.ServerTLS, error) {
	return pki.NewServerTLS(pki.ServerFiles{
		Leaf: pki.PathsIn(n.dir.pkiDir(), "node"), ClientCAFile: pki.PathsIn(n.dir.pkiDir(), "ca").Cert,
		ClientAuth: clientAuth, MinVersion: minVersion, Logger: n.log.With().Str("component", component).Logger(),
	})
}

// agentTransport is how the leader reaches agents: mutual TLS with this
// node's certificate.
func (n *Node) agentTransport() (http.RoundTripper, error) {
	tlsCfg, err := pki.ClientTLSConfig(n.ca.Pool(), n.leaf)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return tr, nil
}
