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
// (server.ServerConfig.NodeOverlay): a node that joined before the overlay
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
// every overlayResync. The device is closed when ctx ends.
func (n *Node) runOverlay(ctx context.Context) error {
	ov := n.state.overlay()
	log := n.log.With().Str("component", "overlay").Str("interface", ov.Interface).Logger()
	mode, err := netstack.ParseMode(ov.Mode)
	if err != nil {
		return fmt.Errorf("overlay mode: %w", err)
	}
	if mode == netstack.ModeOff {
		log.Warn().Msg("overlay off (--wg-mode off): no WireGuard device; other nodes cannot reach this node's containers")
		return nil
	}
	underlay, _ := netip.ParseAddr(n.state.AdvertiseAddress)
	cfg := netstack.Config{Interface: ov.Interface, Port: ov.Port, Mode: mode, PrivateKey: n.wgKey, Underlay: underlay, Logger: log}
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
			dev.Close()
			log.Info().Msg("overlay device closed")
		}
	}()
	retry := overlayRetry
	var skipped map[string]string
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
