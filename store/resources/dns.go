package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"kat.dws.rip/kat/store"
)

// DNSRecord is what service discovery knows of one ready instance (spec
// §7.3): the key /kat/dns/{clusterDomain}/{ns}/{workload}/{instanceID}. The
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

// Key returns the record's key under the cluster domain domain.
func (d DNSRecord) Key(domain string) string {
	return DNSKey(domain, d.Namespace, d.Workload, d.InstanceID)
}

// DNSDomainPrefix is the prefix of every record of one cluster domain.
func DNSDomainPrefix(domain string) string { return prefixDNS + strings.ToLower(domain) + "/" }

// DNSKey is where the record of one instance lives.
func DNSKey(domain, ns, workload, instanceID string) string {
	return DNSDomainPrefix(domain) + ns + "/" + workload + "/" + instanceID
}

// ParseDNSKey splits a key under DNSPrefix into its cluster domain,
// namespace, workload and instance ID; ok is false for any other key.
func ParseDNSKey(key string) (domain, ns, workload, instanceID string, ok bool) {
	rest, found := strings.CutPrefix(key, prefixDNS)
	if !found {
		return "", "", "", "", false
	}
	parts := strings.Split(rest, "/")
	if len(parts) != 4 || slices.Contains(parts, "") {
		return "", "", "", "", false
	}
	return parts[0], parts[1], parts[2], parts[3], true
}

// DecodeDNSRecord decodes the record at kv, checking that it names the
// instance its key does and has an address.
func DecodeDNSRecord(kv store.KV) (DNSRecord, error) {
	_, ns, wl, id, ok := ParseDNSKey(kv.Key)
	if !ok {
		return DNSRecord{}, fmt.Errorf("%s is not a DNS record key (%s{clusterDomain}/{ns}/{workload}/{instanceID})", kv.Key, prefixDNS)
	}
	var d DNSRecord
	if err := json.Unmarshal(kv.Value, &d); err != nil {
		return DNSRecord{}, fmt.Errorf("decode DNS record %s: %w", kv.Key, err)
	}
	if d.Namespace != ns || d.Workload != wl || d.InstanceID != id {
		return DNSRecord{}, fmt.Errorf("DNS record %s names %s/%s/%s", kv.Key, d.Namespace, d.Workload, d.InstanceID)
	}
	if !d.IP.Is4() {
		return DNSRecord{}, fmt.Errorf("DNS record %s: ip %q is not an IPv4 address", kv.Key, d.IP)
	}
	return d, nil
}

// WriteDNSRecords puts the records put under the cluster domain domain and
// deletes the keys del, up to 100 changes to a transaction, and returns the
// store revision after the last write (0 when there was nothing to write).
func (r *Repo) WriteDNSRecords(ctx context.Context, domain string, put []DNSRecord, del []string) (int64, error) {
	ops := make([]store.Op, 0, len(put)+len(del))
	for _, d := range put {
		op, err := putJSON(d.Key(domain), d)
		if err != nil {
			return 0, err
		}
		ops = append(ops, op)
	}
	for _, k := range del {
		if !strings.HasPrefix(k, prefixDNS) {
			return 0, fmt.Errorf("write DNS records: %s is not under %s", k, prefixDNS)
		}
		ops = append(ops, store.Op{Type: store.OpDelete, Key: k})
	}
	rev, err := r.txnsInBatches(ctx, ops)
	if err != nil {
		return 0, fmt.Errorf("write DNS records: %w", err)
	}
	return rev, nil
}

// ListDNSRecords returns the records under the cluster domain domain, by key;
// keys that do not decode are skipped.
func (r *Repo) ListDNSRecords(ctx context.Context, domain string) (map[string]DNSRecord, error) {
	kvs, err := r.st.List(ctx, DNSDomainPrefix(domain))
	if err != nil {
		return nil, fmt.Errorf("list DNS records: %w", err)
	}
	out := make(map[string]DNSRecord, len(kvs))
	for _, kv := range kvs {
		if d, err := DecodeDNSRecord(kv); err == nil {
			out[kv.Key] = d
		}
	}
	return out, nil
}
