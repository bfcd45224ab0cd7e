package resources

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/store"
)

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
func DecodeDNSRecord(kv store.KV) (api.DNSRecord, error) {
	_, ns, wl, id, ok := ParseDNSKey(kv.Key)
	if !ok {
		return api.DNSRecord{}, fmt.Errorf("%s is not a DNS record key (%s{clusterDomain}/{ns}/{workload}/{instanceID})", kv.Key, prefixDNS)
	}
	var d api.DNSRecord
	if err := json.Unmarshal(kv.Value, &d); err != nil {
		return api.DNSRecord{}, fmt.Errorf("decode DNS record %s: %w", kv.Key, err)
	}
	if d.Namespace != ns || d.Workload != wl || d.InstanceID != id {
		return api.DNSRecord{}, fmt.Errorf("DNS record %s names %s/%s/%s", kv.Key, d.Namespace, d.Workload, d.InstanceID)
	}
	if !d.IP.Is4() {
		return api.DNSRecord{}, fmt.Errorf("DNS record %s: ip %q is not an IPv4 address", kv.Key, d.IP)
	}
	return d, nil
}

// WriteDNSRecords puts the records put under the cluster domain domain and
// deletes the keys del, up to 100 changes to a transaction, and returns the
// store revision after the last write (0 when there was nothing to write).
func (r *Repo) WriteDNSRecords(ctx context.Context, domain string, put []api.DNSRecord, del []string) (int64, error) {
	return putAndDelete(ctx, r, "DNS records", prefixDNS, put, func(d api.DNSRecord) string {
		return DNSKey(domain, d.Namespace, d.Workload, d.InstanceID)
	}, del)
}

// ListDNSRecords returns the records under the cluster domain domain, by key;
// keys that do not decode are skipped.
func (r *Repo) ListDNSRecords(ctx context.Context, domain string) (map[string]api.DNSRecord, error) {
	kvs, err := r.st.List(ctx, DNSDomainPrefix(domain))
	if err != nil {
		return nil, fmt.Errorf("list DNS records: %w", err)
	}
	out := make(map[string]api.DNSRecord, len(kvs))
	for _, kv := range kvs {
		if d, err := DecodeDNSRecord(kv); err == nil {
			out[kv.Key] = d
		}
	}
	return out, nil
}
