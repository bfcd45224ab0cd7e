package resources

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"sort"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

// Keys of the overlay network (docs/architecture.md "Overlay"). A node's WireGuard public
// key, endpoint and subnet are three keys under its prefix, written
// together by the leader; every agent watches NetworkNodesPrefix to keep
// its peers. The subnet index makes a subnet belong to one node at most:
// its key is created only while absent.
const (
	prefixNetworkNodes = "/kat/network/nodes/"
	prefixSubnets      = "/kat/network/subnets/"
	prefixIPAM         = "/kat/ipam/"
	prefixDNS          = "/kat/dns/"

	netKeyPublicKey = "wg_pubkey"
	netKeyEndpoint  = "wg_endpoint"
	netKeySubnet    = "subnet"
)

// NetworkNodesPrefix is the prefix of every node's overlay keys.
func NetworkNodesPrefix() string { return prefixNetworkNodes }

// NodeNetworkPrefix is the prefix of one node's overlay keys.
func NodeNetworkPrefix(node string) string { return prefixNetworkNodes + node + "/" }

// NodeSubnetKey is the key of a node's subnet, under its
// NodeNetworkPrefix.
func NodeSubnetKey(node string) string { return NodeNetworkPrefix(node) + netKeySubnet }

// ParseIPAMKey returns the node and address of an IPAMKey; ok is false for
// another key.
func ParseIPAMKey(key string) (node string, ip netip.Addr, ok bool) {
	rest, found := strings.CutPrefix(key, prefixIPAM)
	if !found {
		return "", netip.Addr{}, false
	}
	node, addr, found := strings.Cut(rest, "/")
	if !found || node == "" {
		return "", netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(addr)
	return node, ip, err == nil
}

// SubnetKey is the index entry of a node subnet: its value is the node
// holding it. "/" in the prefix is written as "_".
func SubnetKey(subnet netip.Prefix) string {
	return prefixSubnets + strings.ReplaceAll(subnet.String(), "/", "_")
}

// SubnetsPrefix is the prefix of the subnet index.
func SubnetsPrefix() string { return prefixSubnets }

// NodeIPAMPrefix is the prefix of the instance addresses of one node's
// subnet: /kat/ipam/{node}/{ip} holds the instance ID using the address.
func NodeIPAMPrefix(node string) string { return prefixIPAM + node + "/" }

// IPAMKey is the key recording that an instance holds ip on node.
func IPAMKey(node string, ip netip.Addr) string { return NodeIPAMPrefix(node) + ip.String() }

// IPAMPrefix is the prefix of every node's instance addresses.
func IPAMPrefix() string { return prefixIPAM }

// DNSPrefix is the prefix of the service discovery records every agent's
// DNS server watches: /kat/dns/{clusterDomain}/{ns}/{workload}/{instanceID}.
func DNSPrefix() string { return prefixDNS }

// ErrSubnetsExhausted means clusterCIDR has no free node subnet left.
var ErrSubnetsExhausted = errors.New("no node subnet left in the cluster CIDR")

// EnsureNodeNetwork gives node a subnet of clusterCIDR (prefix length
// clusterCIDR.Bits()+subnetBits) unless it has one, and records its
// WireGuard public key and endpoint when they are not empty. A subnet is
// handed out once: its index key is created in the same transaction as the
// node's subnet key, only while absent, and freed by DeleteNode. It returns
// the node's record as written.
func (r *Repo) EnsureNodeNetwork(ctx context.Context, node string, clusterCIDR netip.Prefix, subnetBits int, publicKey, endpoint string) (*api.NodeNetwork, error) {
	for attempt := 0; attempt < 64; attempt++ {
		cur, err := r.GetNodeNetwork(ctx, node)
		if err != nil && !errors.Is(err, ErrNotFound) {
			return nil, err
		}
		if cur == nil {
			cur = &api.NodeNetwork{Node: node}
		}
		var checks []store.Compare
		var ops []store.Op
		if !cur.Subnet.IsValid() {
			taken, err := r.takenSubnets(ctx)
			if err != nil {
				return nil, err
			}
			sub, err := FirstFreeSubnet(clusterCIDR, subnetBits, taken)
			if err != nil {
				return nil, fmt.Errorf("give node %q a subnet: %w", node, err)
			}
			cur.Subnet = sub
			checks = append(checks,
				store.Compare{Key: SubnetKey(sub), ExpectedVersion: 0},
				store.Compare{Key: NodeNetworkPrefix(node) + netKeySubnet, ExpectedVersion: 0})
			ops = append(ops,
				store.Op{Type: store.OpPut, Key: SubnetKey(sub), Value: []byte(node)},
				store.Op{Type: store.OpPut, Key: NodeNetworkPrefix(node) + netKeySubnet, Value: []byte(sub.String())})
		}
		if publicKey != "" && publicKey != cur.PublicKey {
			cur.PublicKey = publicKey
			ops = append(ops, store.Op{Type: store.OpPut, Key: NodeNetworkPrefix(node) + netKeyPublicKey, Value: []byte(publicKey)})
		}
		if endpoint != "" && endpoint != cur.Endpoint {
			cur.Endpoint = endpoint
			ops = append(ops, store.Op{Type: store.OpPut, Key: NodeNetworkPrefix(node) + netKeyEndpoint, Value: []byte(endpoint)})
		}
		if len(ops) == 0 {
			return cur, nil
		}
		ok, err := r.st.DoTransaction(ctx, checks, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("record the overlay network of node %q: %w", node, err)
		}
		if ok {
			return cur, nil
		}
	}
	return nil, fmt.Errorf("record the overlay network of node %q: too many concurrent subnet allocations", node)
}

// SeedNodeSubnet gives node the subnet it had in another cluster, where it
// keeps running instances with addresses of it: a detached node's control
// plane is seeded so (docs/detached.md). It writes nothing when the node
// has a subnet already, and fails when another node holds this one.
func (r *Repo) SeedNodeSubnet(ctx context.Context, node string, subnet netip.Prefix) error {
	checks := []store.Compare{{Key: SubnetKey(subnet), ExpectedVersion: 0}, {Key: NodeNetworkPrefix(node) + netKeySubnet, ExpectedVersion: 0}}
	ops := []store.Op{
		{Type: store.OpPut, Key: SubnetKey(subnet), Value: []byte(node)},
		{Type: store.OpPut, Key: NodeNetworkPrefix(node) + netKeySubnet, Value: []byte(subnet.String())},
	}
	ok, err := r.st.DoTransaction(ctx, checks, ops, nil)
	if err != nil {
		return fmt.Errorf("seed the subnet %s of node %q: %w", subnet, node, err)
	}
	if !ok {
		cur, err := r.GetNodeNetwork(ctx, node)
		if errors.Is(err, ErrNotFound) {
			return fmt.Errorf("seed the subnet %s of node %q: another node holds it", subnet, node)
		}
		if err != nil {
			return fmt.Errorf("seed the subnet %s of node %q: held already: %w", subnet, node, err)
		}
		if cur.Subnet != subnet {
			return fmt.Errorf("seed the subnet %s of node %q: held already (the node has %s)", subnet, node, cur.Subnet)
		}
		return nil
	}
	return nil
}

// HoldAddresses records that the instances ids name hold their addresses
// on node, without assignments: a detached node's control plane is seeded
// so with the cluster's Job instances it leaves running, whose addresses no
// new instance of the plane may take.
func (r *Repo) HoldAddresses(ctx context.Context, node string, ids map[netip.Addr]string) error {
	ops := make([]store.Op, 0, len(ids))
	for ip, id := range ids {
		ops = append(ops, store.Op{Type: store.OpPut, Key: IPAMKey(node, ip), Value: []byte(id)})
	}
	if len(ops) == 0 {
		return nil
	}
	if _, err := r.st.Txn(ctx, nil, ops, nil); err != nil {
		return fmt.Errorf("hold the addresses of %d instances on node %q: %w", len(ops), node, err)
	}
	return nil
}

// takenSubnets lists the subnet index.
func (r *Repo) takenSubnets(ctx context.Context) ([]netip.Prefix, error) {
	kvs, err := r.st.List(ctx, prefixSubnets)
	if err != nil {
		return nil, fmt.Errorf("list node subnets: %w", err)
	}
	out := make([]netip.Prefix, 0, len(kvs))
	for _, kv := range kvs {
		p, err := netip.ParsePrefix(strings.ReplaceAll(strings.TrimPrefix(kv.Key, prefixSubnets), "_", "/"))
		if err != nil {
			return nil, fmt.Errorf("subnet index key %s: %w", kv.Key, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// GetNodeNetwork returns one node's overlay record, or an error wrapping
// ErrNotFound when the node has none.
func (r *Repo) GetNodeNetwork(ctx context.Context, node string) (*api.NodeNetwork, error) {
	kvs, err := r.st.List(ctx, NodeNetworkPrefix(node))
	if err != nil {
		return nil, fmt.Errorf("read the overlay network of node %q: %w", node, err)
	}
	nets, err := DecodeNodeNetworks(kvs)
	if err != nil {
		return nil, err
	}
	if len(nets) == 0 {
		return nil, fmt.Errorf("overlay network of node %q: %w", node, ErrNotFound)
	}
	return &nets[0], nil
}

// ListNodeNetworks returns every node's overlay record, sorted by node.
func (r *Repo) ListNodeNetworks(ctx context.Context) ([]api.NodeNetwork, error) {
	kvs, err := r.st.List(ctx, prefixNetworkNodes)
	if err != nil {
		return nil, fmt.Errorf("list overlay networks: %w", err)
	}
	return DecodeNodeNetworks(kvs)
}

// DecodeNodeNetworks groups the keys under NetworkNodesPrefix (as a list or
// a watch's snapshot gives them) into one record per node, sorted by node.
// Unknown keys are skipped, so a newer leader may add some.
func DecodeNodeNetworks(kvs []store.KV) ([]api.NodeNetwork, error) {
	byNode := map[string]*api.NodeNetwork{}
	for _, kv := range kvs {
		rest, ok := strings.CutPrefix(kv.Key, prefixNetworkNodes)
		if !ok {
			continue
		}
		node, field, ok := strings.Cut(rest, "/")
		if !ok || node == "" {
			continue
		}
		n := byNode[node]
		if n == nil {
			n = &api.NodeNetwork{Node: node}
			byNode[node] = n
		}
		v := strings.TrimSpace(string(kv.Value))
		switch field {
		case netKeyPublicKey:
			n.PublicKey = v
		case netKeyEndpoint:
			n.Endpoint = v
		case netKeySubnet:
			p, err := netip.ParsePrefix(v)
			if err != nil {
				return nil, fmt.Errorf("subnet of node %q (%s): %w", node, kv.Key, err)
			}
			n.Subnet = p
		}
	}
	out := make([]api.NodeNetwork, 0, len(byNode))
	for _, n := range byNode {
		out = append(out, *n)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Node < out[j].Node })
	return out, nil
}

// FirstFreeSubnet returns the lowest subnet of length
// clusterCIDR.Bits()+subnetBits inside clusterCIDR that overlaps none of
// taken, or an error wrapping ErrSubnetsExhausted.
func FirstFreeSubnet(clusterCIDR netip.Prefix, subnetBits int, taken []netip.Prefix) (netip.Prefix, error) {
	cidr := clusterCIDR.Masked()
	if !cidr.Addr().Is4() {
		return netip.Prefix{}, fmt.Errorf("cluster CIDR %s is not IPv4", clusterCIDR)
	}
	bits := cidr.Bits() + subnetBits
	if subnetBits < 1 || bits > 30 {
		return netip.Prefix{}, fmt.Errorf("node subnet bits %d with cluster CIDR %s give /%d (want 1 to 30-%d)", subnetBits, cidr, bits, cidr.Bits())
	}
	size := uint32(1) << (32 - bits)
	b := cidr.Addr().As4()
	base := binary.BigEndian.Uint32(b[:])
	for i := uint32(0); i < 1<<subnetBits; i++ {
		binary.BigEndian.PutUint32(b[:], base+i*size)
		cand := netip.PrefixFrom(netip.AddrFrom4(b), bits)
		free := true
		for _, t := range taken {
			if t.Overlaps(cand) {
				free = false
				break
			}
		}
		if free {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w: all %d /%d subnets of %s are held (raise nodeSubnetBits or widen clusterCIDR)", ErrSubnetsExhausted, 1<<subnetBits, bits, cidr)
}
