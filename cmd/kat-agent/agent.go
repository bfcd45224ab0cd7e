package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"sync"
	"time"

	"github.com/rs/zerolog"
	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/api/server"
	"kat.dws.rip/kat/build"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// agentOptions are the flags of the node agent (the container side).
type agentOptions struct {
	podman         string
	podmanRoot     string
	podmanRunRoot  string
	volumeBasePath string
	maxPulls       int
	maxSteps       int
	// Builds of app repositories (push to deploy).
	buildDir           string
	registryAuthFile   string
	insecureRegistries []string
	keepImages         int
	buildTimeout       time.Duration
	maxBuilds          int
	appPollInterval    time.Duration
	// Credentials for app repositories (leader ls-remote and agent clones).
	appTokenFile      string
	appUsername       string
	appBasicAuthFile  string
	appSSHKeyFile     string
	appKnownHostsFile string
}

// appAuth is the app-repository credentials the flags name, as a source's.
func (o *agentOptions) appAuth() resources.SourceAuth {
	return resources.SourceAuth{TokenFile: o.appTokenFile, Username: o.appUsername, BasicAuthFile: o.appBasicAuthFile,
		SSHKeyFile: o.appSSHKeyFile, KnownHostsFile: o.appKnownHostsFile}
}

func (o *agentOptions) addFlags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.podman, "podman", "podman", "podman binary that runs this node's containers")
	f.StringVar(&o.podmanRoot, "podman-root", "", "podman storage root (--root; default: podman's)")
	f.StringVar(&o.podmanRunRoot, "podman-runroot", "", "podman run root (--runroot; default: podman's)")
	f.StringVar(&o.volumeBasePath, "volume-base-path", "", "where SimpleClusterStorage volumes live (default: cluster.kat volumeBasePath, /var/lib/kat/volumes)")
	f.IntVar(&o.maxPulls, "max-concurrent-pulls", 2, "image pulls in flight at most")
	f.IntVar(&o.maxSteps, "max-concurrent-steps", 1, "container operations (create, start, remove, health check) in flight at most; podman 4.3 can deadlock on concurrent creates")
	f.StringVar(&o.buildDir, "build-dir", "", "where app-repository clones and build logs live (default: DATA_DIR/builds)")
	f.StringVar(&o.registryAuthFile, "registry-auth-file", "", "podman auth file with the build cache registry's credentials (default: podman's)")
	f.StringSliceVar(&o.insecureRegistries, "insecure-registry", nil, "build cache registry (host:port) reached without TLS verification; repeatable")
	f.IntVar(&o.keepImages, "keep-images", 3, "kat-local images kept per workload by build housekeeping")
	f.DurationVar(&o.buildTimeout, "build-timeout", 10*time.Minute, "bound of one image build (cache pull, clone, podman build, push)")
	f.IntVar(&o.maxBuilds, "max-concurrent-builds", 2, "image builds in flight at most")
	f.StringVar(&o.appTokenFile, "app-repo-token-file", "", "token (first line) for app repositories over HTTPS, sent as the basic-auth password (default: anonymous)")
	f.StringVar(&o.appUsername, "app-repo-username", "", "user sent with --app-repo-token-file (default x-access-token), or the SSH user (default git)")
	f.StringVar(&o.appBasicAuthFile, "app-repo-basic-auth-file", "", "file with user:password for app repositories over HTTPS")
	f.StringVar(&o.appSSHKeyFile, "app-repo-ssh-key-file", "", "unencrypted PEM private key for ssh:// app repositories (needs --app-repo-known-hosts-file)")
	f.StringVar(&o.appKnownHostsFile, "app-repo-known-hosts-file", "", "known_hosts file SSH host keys of app repositories are checked against")
	f.DurationVar(&o.appPollInterval, "app-poll-interval", 0, "how often the leader resolves app repositories' branches without a webhook (default: cluster.kat gitops pollIntervalSeconds, else 30s)")
}

func (o *agentOptions) validate() error {
	if o.maxPulls < 1 {
		return fmt.Errorf("--max-concurrent-pulls: %d must be at least 1", o.maxPulls)
	}
	if o.keepImages < 1 {
		return fmt.Errorf("--keep-images: %d must be at least 1", o.keepImages)
	}
	if o.maxBuilds < 1 {
		return fmt.Errorf("--max-concurrent-builds: %d must be at least 1", o.maxBuilds)
	}
	if o.buildTimeout < time.Second {
		return fmt.Errorf("--build-timeout: %s must be at least 1s", o.buildTimeout)
	}
	if o.appPollInterval != 0 && o.appPollInterval < time.Second {
		return fmt.Errorf("--app-poll-interval: %s must be at least 1s", o.appPollInterval)
	}
	if n := countSet(o.appTokenFile, o.appBasicAuthFile, o.appSSHKeyFile); n > 1 {
		return errors.New("--app-repo-token-file, --app-repo-basic-auth-file and --app-repo-ssh-key-file: give at most one")
	}
	if o.appSSHKeyFile != "" && o.appKnownHostsFile == "" {
		return errors.New("--app-repo-ssh-key-file needs --app-repo-known-hosts-file")
	}
	if o.maxSteps < 1 {
		return fmt.Errorf("--max-concurrent-steps: %d must be at least 1", o.maxSteps)
	}
	return nil
}

// runAgent runs the node's side: the local reconcile loop, the agent API on
// the agent port and the heartbeat to the leader. Containers keep running
// when it returns.
func (n *node) runAgent(ctx context.Context) error {
	o := n.opts.agent
	spec := n.state.Cluster.Spec
	log := n.log.With().Str("component", "agent").Logger()
	if _, err := exec.LookPath(o.podman); err != nil {
		log.Error().Err(err).Str("podman", o.podman).
			Msg("podman not found: this node cannot run containers and reports RuntimeReady=False; install it with scripts/install-prereqs.sh")
	}
	rt := runtime.NewPodman(runtime.PodmanConfig{Binary: o.podman, Root: o.podmanRoot, RunRoot: o.podmanRunRoot})
	ids, idErr := runtime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	var idRange *runtime.SubIDRange
	if idErr != nil {
		log.Warn().Err(idErr).Msg("no sub-id range for user containers: every container gets podman's --userns=auto, and replicas sharing a volume lose write access to it; run scripts/install-prereqs.sh")
	} else {
		idRange = &ids
		log.Info().Int64("start", ids.Start).Int64("count", ids.Count).Msg("workload user namespaces from the containers sub-id range")
	}
	volumes := o.volumeBasePath
	if volumes == "" {
		volumes = spec.VolumeBasePath
	}
	buildDir := o.buildDir
	if buildDir == "" {
		buildDir = n.dir.path("builds")
	}
	builder, err := build.New(build.Config{
		Node: n.state.NodeName, WorkDir: buildDir, Podman: rt, Records: reconcile.BuildRecords{Repo: n.repo},
		Timeout: o.buildTimeout, AuthFile: o.registryAuthFile, InsecureRegistries: o.insecureRegistries,
		MaxParallel: o.maxBuilds, KeepImages: o.keepImages, Logger: n.log.With().Str("component", "build").Logger(),
	})
	if err != nil {
		return err
	}
	defer builder.Close() // after every goroutine below has ended: stops builds still under way
	beat := make(chan struct{}, 1)
	ag, err := reconcile.NewAgent(reconcile.AgentConfig{
		Repo: n.repo, Node: n.state.NodeName, Runtime: rt, MaxConcurrentPulls: o.maxPulls, Builder: builder,
		BuildAuth: build.Auth{TokenFile: o.appTokenFile, Username: o.appUsername, BasicAuthFile: o.appBasicAuthFile,
			SSHKeyFile: o.appSSHKeyFile, KnownHostsFile: o.appKnownHostsFile}, MaxConcurrentSteps: o.maxSteps,
		BuildSpec: containerSpecBuilder(n.state.NodeName, volumes, idRange, log),
		OnChange: func() {
			select {
			case beat <- struct{}{}:
			default:
			}
		},
		Logger: log,
	})
	if err != nil {
		return err
	}
	srv, ln, err := n.agentServer(ag)
	if err != nil {
		return err
	}
	post, err := n.leaderPoster()
	if err != nil {
		ln.Close()
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return ag.Run(gctx) })
	g.Go(func() error {
		log.Info().Str("addr", ln.Addr().String()).Msg("serving agent API")
		if err := srv.ServeTLS(ln, "", ""); err != nil && !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("serve agent API: %w", err)
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
		defer cancel()
		return srv.Shutdown(sctx)
	})
	g.Go(func() error {
		return reconcile.RunHeartbeat(gctx, reconcile.HeartbeatConfig{
			Node: n.state.NodeName, NodeUID: n.state.NodeUID, Post: post, Wake: beat,
			Instances: ag.Instances, Conditions: ag.Conditions,
			Interval: time.Duration(spec.AgentTickSeconds) * time.Second,
			Logger:   n.log.With().Str("component", "heartbeat").Logger(),
		})
	})
	return g.Wait()
}

// containerSpecBuilder maps an assignment to its container with the runtime's
// ContainerSpecFor, creating its volumes' host paths first. An assignment
// with a user namespace slot gets its workload's explicit id map from ids;
// without one, or with ids nil, Podman's --userns=auto.
func containerSpecBuilder(node, volumeBase string, ids *runtime.SubIDRange, log zerolog.Logger) reconcile.SpecBuilder {
	return func(a resources.Assignment, q *quadlet.Quadlet, hostPorts map[int]int) (runtime.ContainerSpec, error) {
		inst := runtime.Instance{
			ID: a.InstanceID, Node: node, Generation: a.Generation, SpecHash: a.SpecHash, SourceCommit: a.SourceCommit,
			Image: a.Image, VolumeBasePath: volumeBase, HostPorts: hostPorts,
		}
		if a.UserNSSlot != nil && ids != nil {
			m, ok := ids.Map(*a.UserNSSlot)
			if !ok {
				log.Warn().Str("instance", a.InstanceID).Int("slot", *a.UserNSSlot).Int64("slots", ids.Slots()).
					Msg("user namespace slot outside the sub-id range: using --userns=auto")
			}
			inst.IDMap = m
		}
		vols, err := runtime.VolumePaths(q, inst)
		if err != nil {
			return runtime.ContainerSpec{}, err
		}
		if err := runtime.PrepareVolumes(vols); err != nil {
			return runtime.ContainerSpec{}, err
		}
		return runtime.ContainerSpecFor(q, inst)
	}
}

// agentServer listens on the agent port with mutual TLS: only holders of a
// certificate of the cluster CA may call it.
func (n *node) agentServer(ag *reconcile.Agent) (*http.Server, net.Listener, error) {
	tlsCfg, err := pki.ServerTLSConfig(n.leaf, n.ca.Pool(), true)
	if err != nil {
		return nil, nil, err
	}
	port := n.state.Cluster.Spec.AgentPort
	ln, err := net.Listen("tcp", net.JoinHostPort("", strconv.Itoa(port)))
	if err != nil {
		return nil, nil, fmt.Errorf("listen for the agent API on port %d: %w", port, err)
	}
	h := server.AgentHandler(server.AgentConfig{
		Logs: func(ctx context.Context, id string, follow bool, w io.Writer) error {
			err := ag.Logs(ctx, id, follow, w)
			if errors.Is(err, reconcile.ErrUnknownInstance) {
				return fmt.Errorf("%w: %w", server.ErrUnknownInstance, err)
			}
			return err
		},
		BuildLog: func(_ context.Context, ns, name, commit string, w io.Writer) error {
			err := ag.BuildLog(ns, name, commit, w)
			if errors.Is(err, build.ErrLogNotFound) || errors.Is(err, build.ErrInvalid) || errors.Is(err, reconcile.ErrNoBuilder) {
				return fmt.Errorf("%w: %w", server.ErrUnknownBuild, err)
			}
			return err
		},
		Logger: n.log.With().Str("component", "agent-api").Logger(),
	})
	return &http.Server{Handler: h, TLSConfig: tlsCfg, ReadHeaderTimeout: 10 * time.Second}, ln, nil
}

// agentTransport is how the leader reaches agents: mutual TLS with this
// node's certificate.
func (n *node) agentTransport() (http.RoundTripper, error) {
	tlsCfg, err := pki.ClientTLSConfig(n.ca.Pool(), n.leaf)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = tlsCfg
	return tr, nil
}

// leaderPoster returns the heartbeat's send function: POST the status to the
// current leader's API, authenticated by this node's certificate.
func (n *node) leaderPoster() (func(context.Context, resources.NodeStatus) error, error) {
	var (
		mu     sync.Mutex
		url    string
		client *api.Client
	)
	return func(ctx context.Context, st resources.NodeStatus) error {
		ep, err := n.repo.GetLeaderEndpoint(ctx)
		if err != nil {
			return fmt.Errorf("find the leader: %w", err)
		}
		mu.Lock()
		if client == nil || url != ep.APIURL {
			c, err := api.NewClient(api.ClientConfig{Server: ep.APIURL, CAData: n.ca.CertPEM, ClientCert: n.leaf, Timeout: 10 * time.Second})
			if err != nil {
				mu.Unlock()
				return err
			}
			client, url = c, ep.APIURL
		}
		c := client
		mu.Unlock()
		return c.PostNodeStatus(ctx, st)
	}, nil
}

// touchNodeStatus marks the leader's own node live at once on election,
// keeping the instances its agent reported last; the agent's next heartbeat
// (over the API, which is only now starting) brings the rest.
func (n *node) touchNodeStatus(ctx context.Context) error {
	st, err := n.repo.GetNodeStatus(ctx, n.state.NodeName)
	if err != nil && !errors.Is(err, resources.ErrNotFound) {
		return err
	}
	if st == nil {
		st = &resources.NodeStatus{}
	}
	res, err := reconcile.DetectResources()
	if err != nil {
		return err
	}
	st.NodeName, st.NodeUID, st.Timestamp, st.Resources = n.state.NodeName, n.state.NodeUID, time.Now().Unix(), res
	return n.repo.PutNodeStatus(ctx, *st)
}

func countSet(vals ...string) int {
	n := 0
	for _, v := range vals {
		if v != "" {
			n++
		}
	}
	return n
}
