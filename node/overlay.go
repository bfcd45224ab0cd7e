package node

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"time"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/reconcile"
	"kat.dws.rip/kat/store/resources"
)

// Timing of the overlay loop.
const (
	// overlayResync re-lists the overlay records without a watch event.
	overlayResync = 30 * time.Second
	// overlayRetry is the first wait after a failed open or sync; it
	// doubles up to overlayMaxRetry.
	overlayRetry    = time.Second
	overlayMaxRetry = time.Minute
	// overlayNetworkWait bounds the wait for the node's container network
	// before the overlay address goes up.
	overlayNetworkWait = 30 * time.Second
)

// overlayReport is what the node tells the leader of its overlay device:
// its public key and port; nil when the overlay is off.
func overlayReport(st *nodeState, key wgtypes.Key) *api.NodeOverlay {
	ov := st.overlay()
	if netstack.Mode(ov.Mode) == netstack.ModeOff {
		return nil
	}
	return &api.NodeOverlay{PublicKey: key.PublicKey().String(), Port: ov.Port}
}

// ensureNodeNetwork is the leader's record of a node's overlay: the node
// gets its subnet of clusterCIDR (once), and, when o is set, its public key
// and endpoint (advertise address and o.Port).
func (n *Node) ensureNodeNetwork(ctx context.Context, node, advertiseAddress string, o *api.NodeOverlay) error {
	spec := n.state.Cluster.Spec
	var key, endpoint string
	if o != nil {
		key, endpoint = o.PublicKey, net.JoinHostPort(advertiseAddress, strconv.Itoa(o.Port))
	}
	_, err := n.repo.EnsureNodeNetwork(ctx, node, spec.ClusterPrefix(), spec.NodeSubnetBits, key, endpoint)
	return err
}

// recordOverlay records the overlay a node reports in its status
// (resources.NewNodeFacts: the API's for workers, a member's own): a node that joined before the overlay
// existed, or whose port changed, is brought up to date. The endpoint's
// address is the one the node registered with, never one it reports.
func (n *Node) recordOverlay(ctx context.Context, node string, o api.NodeOverlay) error {
	reg, err := n.repo.GetNodeRegistration(ctx, node)
	if err != nil {
		return err
	}
	return n.ensureNodeNetwork(ctx, node, reg.AdvertiseAddress, &o)
}

// runOverlay runs the node's overlay device until ctx ends: it opens it
// (retrying with back-off, so a missing /dev/net/tun or a taken interface
// name is logged, not fatal to the agent), then keeps its address, peers
// and routes equal to what /kat/network/nodes/ says, on every change and
// every overlayResync. Before it first puts the node's address up on a
// subnet, it waits (at most overlayNetworkWait) until waitNetwork says the
// agent made its container network there. The device is closed when ctx
// ends.
func (n *Node) runOverlay(ctx context.Context, waitNetwork func(context.Context, netip.Prefix) error) error {
	ov := n.state.overlay()
	// netstack names the interface on its own lines.
	base := n.log.With().Str("component", "overlay").Logger()
	log := base.With().Str("interface", ov.Interface).Logger()
	mode, err := netstack.ParseMode(ov.Mode)
	if err != nil {
		return fmt.Errorf("overlay mode: %w", err)
	}
	if mode == netstack.ModeOff {
		log.Warn().Msg("overlay off (--wg-mode off): no WireGuard device; other nodes cannot reach this node's containers")
		return nil
	}
	underlay, _ := netip.ParseAddr(n.state.AdvertiseAddress)
	cfg := netstack.Config{Interface: ov.Interface, Port: ov.Port, Mode: mode, PrivateKey: n.wgKey, Underlay: underlay, Logger: base}
	// Watch before the first listing, so that no change falls between.
	wctx, stopWatch := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer stopWatch()
	wake := make(chan struct{}, 1)
	watch, err := n.repo.Store().Watch(wctx, resources.NetworkNodesPrefix(), 0)
	if err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return fmt.Errorf("overlay: watch %s: %w", resources.NetworkNodesPrefix(), err)
	}
	wg.Add(1)
	go func() {
		defer wg.Done()
		reconcile.Forward(watch, wake)
	}()

	var dev *netstack.Device
	defer func() {
		if dev != nil {
			n.overlayDev.Store(nil)
			dev.Close()
			log.Info().Msg("overlay device closed")
		}
	}()
	retry := overlayRetry
	var skipped map[string]string
	var networkFor netip.Prefix // the subnet whose container network was waited for
	resync := time.NewTicker(overlayResync)
	defer resync.Stop()
	for {
		err := func() error {
			if dev == nil {
				d, err := netstack.Open(cfg)
				if err != nil {
					return fmt.Errorf("open the overlay device: %w", err)
				}
				dev = d
				n.overlayDev.Store(d)
				log.Info().Str("device_type", d.Type()).Int("mtu", d.MTU()).Int("port", ov.Port).
					Str("public_key", n.wgKey.PublicKey().String()).Msg("overlay device ready")
			}
			nodes, err := n.repo.ListNodeNetworks(ctx)
			if err != nil {
				return err
			}
			plan := netstack.PlanFor(n.state.NodeName, nodes)
			if !maps.Equal(plan.Skipped, skipped) {
				skipped = plan.Skipped
				for node, why := range skipped {
					log.Info().Str("peer", node).Str("reason", why).Msg("node is not an overlay peer")
				}
			}
			if plan.Subnet.IsValid() && plan.Subnet != networkFor && waitNetwork != nil {
				// The node's container network first: netavark refuses
				// one whose gateway (the overlay address) an interface
				// holds already. Not forever: a node whose Podman cannot
				// make networks still joins the overlay.
				wctx, cancel := context.WithTimeout(ctx, overlayNetworkWait)
				err := waitNetwork(wctx, plan.Subnet)
				cancel()
				if ctx.Err() != nil {
					return ctx.Err()
				}
				if err != nil {
					log.Warn().Str("subnet", plan.Subnet.String()).Dur("waited", overlayNetworkWait).
						Msg("the node's container network is not made; putting the overlay address up anyway (containers may not start until the agent can make it)")
				}
				networkFor = plan.Subnet
			}
			return dev.Sync(plan)
		}()
		var after <-chan time.Time
		switch {
		case err == nil:
			retry = overlayRetry
		case ctx.Err() != nil:
			return nil
		default:
			log.Error().Err(err).Dur("retry_in", retry).Msg("overlay not in sync")
			after = time.After(retry)
			retry = min(2*retry, overlayMaxRetry)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-wake:
		case <-resync.C:
		case <-after:
		}
	}
}

// overlayPeers reads the overlay device's peers for the heartbeat: none
// without a device, or when it cannot be read (logged).
func (n *Node) overlayPeers() []api.OverlayPeer {
	dev := n.overlayDev.Load()
	if dev == nil {
		return nil
	}
	peers, err := dev.Peers()
	if err != nil {
		n.log.Debug().Err(err).Str("component", "overlay").Msg("overlay peers not read")
		return nil
	}
	out := make([]api.OverlayPeer, 0, len(peers))
	for _, p := range peers {
		out = append(out, api.OverlayPeer{Node: p.Node, PublicKey: p.PublicKey.String(), Endpoint: p.Endpoint,
			LastHandshake: p.LastHandshake.UTC(), RxBytes: p.RxBytes, TxBytes: p.TxBytes})
	}
	return out
}
