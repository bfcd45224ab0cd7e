package node

import (
	"context"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
)

// signMetricsCert signs a scraper's CSR with the cluster CA as its metrics
// certificate (api.MetricsCertPrefix+name), which the API and agent ports
// admit to /metrics only.
func (n *Node) signMetricsCert(_ context.Context, name string, csrPEM []byte, validity time.Duration) ([]byte, error) {
	return n.ca.SignCSR(csrPEM, pki.LeafRequest{CommonName: api.MetricsCertPrefix + name, Validity: validity})
}
