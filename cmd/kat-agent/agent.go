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

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"

	"kat.dws.rip/kat/api"
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
}

func (o *agentOptions) addFlags(f *pflag.FlagSet) {
	f.StringVar(&o.podman, "podman", "podman", "podman binary that runs this node's containers")
	f.StringVar(&o.podmanRoot, "podman-root", "", "podman storage root (--root; default: podman's)")
	f.StringVar(&o.podmanRunRoot, "podman-runroot", "", "podman run root (--runroot; default: podman's)")
	f.StringVar(&o.volumeBasePath, "volume-base-path", "", "where SimpleClusterStorage volumes live (default: cluster.kat volumeBasePath, /var/lib/kat/volumes)")
	f.IntVar(&o.maxPulls, "max-concurrent-pulls", 2, "image pulls in flight at most")
	f.IntVar(&o.maxSteps, "max-concurrent-steps", 1, "container operations (create, start, remove, health check) in flight at most; podman 4.3 can deadlock on concurrent creates")
}

func (o *agentOptions) validate() error {
	if o.maxPulls < 1 {
		return fmt.Errorf("--max-concurrent-pulls: %d must be at least 1", o.maxPulls)
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
	volumes := o.volumeBasePath
	if volumes == "" {
		volumes = spec.VolumeBasePath
	}
	beat := make(chan struct{}, 1)
	ag, err := reconcile.NewAgent(reconcile.AgentConfig{
		Repo: n.repo, Node: n.state.NodeName, Runtime: rt, MaxConcurrentPulls: o.maxPulls, MaxConcurrentSteps: o.maxSteps,
		BuildSpec: containerSpecBuilder(n.state.NodeName, volumes),
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
// ContainerSpecFor, creating its volumes' host paths first.
func containerSpecBuilder(node, volumeBase string) reconcile.SpecBuilder {
	return func(a resources.Assignment, q *quadlet.Quadlet, hostPorts map[int]int) (runtime.ContainerSpec, error) {
		inst := runtime.Instance{
			ID: a.InstanceID, Node: node, Generation: a.Generation, SpecHash: a.SpecHash, SourceCommit: a.SourceCommit,
			Image: a.Image, VolumeBasePath: volumeBase, HostPorts: hostPorts,
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
	h := api.AgentHandler(api.AgentConfig{
		Logs: func(ctx context.Context, id string, follow bool, w io.Writer) error {
			err := ag.Logs(ctx, id, follow, w)
			if errors.Is(err, reconcile.ErrUnknownInstance) {
				return fmt.Errorf("%w: %w", api.ErrUnknownInstance, err)
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
