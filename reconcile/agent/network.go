package agent

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll"
	"kat.dws.rip/kat/netstack/ipam"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
)

// DefaultNetworkName is AgentConfig.NetworkName's default.
const DefaultNetworkName = "kat"

// instanceDNSOptions are the resolv.conf options of an instance with an
// overlay address: a name of up to one dot ("web", "web.ns2") is looked up
// under the search domains first, a longer one as it is first.
var instanceDNSOptions = []string{"ndots:2"}

// Networks makes the node's Podman network; runtime.Podman is one.
type Networks interface {
	EnsureNetwork(ctx context.Context, spec runtime.NetworkSpec) (created bool, err error)
}

var _ Networks = (*runtime.Podman)(nil)

// ErrNetworkNotReady means an instance with an overlay address cannot run
// yet: the node's network is not made (no subnet yet, or EnsureNetwork
// failed). The step is retried.
var ErrNetworkNotReady = errors.New("the node's container network is not ready")

// nodeNetwork is what the agent knows of its node's network.
type nodeNetwork struct {
	// rec is the node's overlay record whose network was made; nil while
	// none is.
	rec *api.NodeNetwork
	// err is why the network is not made.
	err error
	// failed is true when making it failed (not: no subnet yet): it is
	// tried again every nodeRetryCap.
	failed bool
	// at is when it was last made or tried.
	at time.Time
}

// netState holds the node's network as last made. It is safe for
// concurrent use.
type netState struct {
	mu  sync.Mutex
	cur nodeNetwork
}

func (s *netState) get() nodeNetwork {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cur
}

// set records n and returns what it replaces.
func (s *netState) set(n nodeNetwork) (was nodeNetwork) {
	s.mu.Lock()
	defer s.mu.Unlock()
	was, s.cur = s.cur, n
	return was
}

// ensureNetwork reads the node's overlay record when asked to and makes
// its Podman network: the node's subnet, the gateway at its overlay
// address, DNS off. A node without a record, or an agent without Networks,
// has none.
func (ag *Agent) ensureNetwork(ctx context.Context) {
	if !ag.netDirty.Swap(false) {
		return
	}
	rec, err := ag.cfg.Repo.GetNodeNetwork(ctx, ag.cfg.Node)
	// A node without a subnet is normal in a cluster without the overlay:
	// only a failure is logged.
	failed := false
	switch {
	case errors.Is(err, resources.ErrNotFound) || (err == nil && !rec.Subnet.IsValid()):
		rec, err = nil, fmt.Errorf("%w: node %s has no overlay subnet yet", ErrNetworkNotReady, ag.cfg.Node)
	case err != nil:
		rec, err, failed = nil, fmt.Errorf("%w: %w", ErrNetworkNotReady, err), true
	case ag.cfg.Networks == nil:
		rec, err = nil, fmt.Errorf("%w: this agent manages no container network", ErrNetworkNotReady)
	default:
		spec := runtime.NetworkSpec{Name: ag.cfg.NetworkName, Subnet: rec.Subnet.Masked(), Gateway: rec.OverlayIP()}
		created, nerr := ag.cfg.Networks.EnsureNetwork(ctx, spec)
		switch {
		case nerr != nil:
			rec, err, failed = nil, fmt.Errorf("%w: network %s (subnet %s): %w", ErrNetworkNotReady, spec.Name, spec.Subnet, nerr), true
		case created:
			ag.cfg.Logger.Info().Str("network", spec.Name).Str("subnet", spec.Subnet.String()).Str("gateway", spec.Gateway.String()).
				Msg("created the node's container network")
		}
	}
	if ctx.Err() != nil {
		ag.netDirty.Store(true)
		return
	}
	was := ag.network.set(nodeNetwork{rec: rec, err: err, failed: failed, at: ag.cfg.Now()}).err
	switch {
	case failed && (was == nil || was.Error() != err.Error()):
		ag.cfg.Logger.Warn().Err(err).Msg("instances with overlay addresses wait for the node's network")
	case err == nil && was != nil:
		ag.nodeRecovered("the node's container network is made")
	}
}

// retryNetworkDue asks for the node's network to be made again when making
// it failed nodeRetryCap or longer ago: its cause (a stale network holding
// the subnet, a runtime down) may be gone without any event saying so.
func (ag *Agent) retryNetworkDue(now time.Time) {
	if n := ag.network.get(); n.failed && now.Sub(n.at) >= nodeRetryCap {
		ag.netDirty.Store(true)
	}
}

// joinNetwork puts the container of assignment a on the node's network at
// a's address, with the node's DNS server as its only nameserver and the
// search path of its namespace. An assignment without an address keeps
// Podman's default network, as before IPAM.
func (ag *Agent) joinNetwork(spec *runtime.ContainerSpec, a api.Assignment) error {
	if !a.IP.IsValid() {
		return nil
	}
	n := ag.network.get()
	if n.rec == nil {
		if n.err == nil {
			n.err = ErrNetworkNotReady
		}
		return fmt.Errorf("instance address %s: %w", a.IP, n.err)
	}
	if !ipam.InstanceAddress(n.rec.Subnet, a.IP) {
		return fmt.Errorf("%w: instance address %s is not in node subnet %s", ErrNetworkNotReady, a.IP, n.rec.Subnet)
	}
	domain := ag.cfg.ClusterDomain
	spec.Network, spec.IP = ag.cfg.NetworkName, a.IP
	spec.DNS = []netip.Addr{n.rec.OverlayIP()}
	spec.DNSSearch = []string{a.Namespace + "." + domain, domain}
	spec.DNSOptions = instanceDNSOptions
	return spec.Validate()
}

// WaitNetwork returns once the node's container network has been made on
// subnet, or at once when the agent manages no container network, or with
// ctx's error. The overlay waits for it before it puts the node's address
// on its interface: netavark refuses to create a network whose gateway
// another interface of the host holds already, while a network made first
// keeps working when the address appears.
func (ag *Agent) WaitNetwork(ctx context.Context, subnet netip.Prefix) error {
	if ag.cfg.Networks == nil {
		return nil
	}
	return poll.Wait(ctx, func() (bool, error) {
		rec := ag.network.get().rec
		return rec != nil && rec.Subnet.Masked() == subnet.Masked(), nil
	})
}
