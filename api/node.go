package api

import (
	"net"
	"net/netip"
	"strconv"
	"time"
)

// NodeRegistration is a node's record (/kat/nodes/registration/{node}),
// written when it joins (or, for the first leader, at init) and changed by
// the operator's verbs (cordon, drain, label, taint).
type NodeRegistration struct {
	Name             string            `json:"name"`
	UID              string            `json:"uid"`
	AdvertiseAddress string            `json:"advertiseAddress"`
	APIPort          int               `json:"apiPort"`
	AgentPort        int               `json:"agentPort"`
	Labels           map[string]string `json:"labels,omitempty"`
	JoinedAt         time.Time         `json:"joinedAt"`
	// Taints repel instances that do not tolerate them (spec §4.4).
	Taints []Taint `json:"taints,omitempty"`
	// Unschedulable is set by katcall cordon (and drain): the node gets no
	// new instance; what runs there stays.
	Unschedulable bool `json:"unschedulable"`
	// Draining is set by katcall drain: Service and DaemonService instances
	// are moved off the node, Job instances run to their end.
	Draining bool `json:"draining"`
	// EtcdMember marks a node that is a member of the cluster's etcd
	// quorum: a leader candidate that serves the API (katcall and webhook
	// senders may use any member's address).
	EtcdMember bool `json:"etcdMember"`
}

// APIURL is the URL of the node's API server (an etcd member's), "" when
// it has no API port.
func (r NodeRegistration) APIURL() string {
	if r.APIPort == 0 {
		return ""
	}
	return "https://" + net.JoinHostPort(r.AdvertiseAddress, strconv.Itoa(r.APIPort))
}

// Taint effects.
const (
	TaintNoSchedule       = "NoSchedule"
	TaintPreferNoSchedule = "PreferNoSchedule"
)

// NodeHeartbeat is a node's last heartbeat: when it beat, in Unix seconds
// (the time its status says).
type NodeHeartbeat struct {
	Timestamp int64 `json:"timestamp"`
}

// NodeNetwork is a node's place in the overlay: the subnet the leader gave
// it and its WireGuard identity.
type NodeNetwork struct {
	Node string
	// Subnet is the node's share of clusterCIDR: its instances' addresses
	// and its overlay address come from it.
	Subnet netip.Prefix
	// PublicKey is the base64 WireGuard public key; "" until the node
	// reported one.
	PublicKey string
	// Endpoint is host:port where the node's WireGuard device listens; ""
	// until the node reported one.
	Endpoint string
}

// OverlayIP is the node's own address in the overlay: the first address of
// its subnet, where its DNS server listens and its containers' gateway is.
func (n NodeNetwork) OverlayIP() netip.Addr { return n.Subnet.Masked().Addr().Next() }

// Taint marks a node so that only instances tolerating it are placed there.
// Effect is NoSchedule or PreferNoSchedule.
type Taint struct {
	Key    string `json:"key"`
	Value  string `json:"value,omitempty"`
	Effect string `json:"effect"`
}

// String is the taint as katcall taint takes it: "key=value:Effect", or
// "key:Effect" without a value.
func (t Taint) String() string {
	if t.Value == "" {
		return t.Key + ":" + t.Effect
	}
	return t.Key + "=" + t.Value + ":" + t.Effect
}
