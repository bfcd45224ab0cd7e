package api

import (
	"net/netip"
	"slices"
)

// DNSRecord is what service discovery knows of one ready instance
// (docs/architecture.md "DNS"): the key /kat/dns/{clusterDomain}/{ns}/{workload}/{instanceID}. The
// leader's records loop is its only writer: it puts the record when the
// instance is ready and deletes it when the instance is not any more. Every
// agent's DNS server answers from these records:
//
//	{workload}.{ns}.{clusterDomain}                 A, one per ready instance
//	{instanceID}.{workload}.{ns}.{clusterDomain}    A of the instance
//	_{port}._{proto}.{workload}.{ns}.{clusterDomain} SRV, one per instance and named port
type DNSRecord struct {
	Namespace  string `json:"namespace"`
	Workload   string `json:"workload"`
	InstanceID string `json:"instanceID"`
	// Node is the node running the instance.
	Node string `json:"node"`
	// IP is the instance's overlay address.
	IP netip.Addr `json:"ip"`
	// Ports are the named ports of the instance's VirtualLoadBalancer.kat;
	// unnamed ports have no SRV record and are left out. Default none.
	Ports []DNSPort `json:"ports,omitempty"`
}

// DNSPort is one named container port of an instance.
type DNSPort struct {
	// Name is the port's name in VirtualLoadBalancer.kat, lowercased.
	Name string `json:"name"`
	Port int    `json:"port"`
	// Protocol is "tcp" or "udp".
	Protocol string `json:"protocol"`
}

// Equal reports whether two records say the same.
func (d DNSRecord) Equal(o DNSRecord) bool {
	return d.Namespace == o.Namespace && d.Workload == o.Workload && d.InstanceID == o.InstanceID && d.Node == o.Node &&
		d.IP == o.IP && slices.Equal(d.Ports, o.Ports)
}
