package node

import (
	"fmt"
	"net"
	"os"

	"kat.dws.rip/kat/pki"
)

// ensurePKI reads the cluster CA and the node's certificate of a node that
// holds the CA key (init, or an etcd member), making those that do not exist
// yet.
func (n *Node) ensurePKI() error {
	ca, created, err := pki.EnsureCA(pki.PathsIn(n.dir.pkiDir(), "ca"), "kat-"+n.state.Cluster.Metadata.Name+"-ca")
	if err != nil {
		return err
	}
	if created {
		n.log.Info().Msg("created cluster CA")
	}
	leaf, issued, err := pki.EnsureLeaf(pki.PathsIn(n.dir.pkiDir(), "node"), ca, nodeLeafRequest(n.state.NodeName, n.state.AdvertiseAddress))
	if err != nil {
		return err
	}
	if issued {
		n.log.Info().Str("node", n.state.NodeName).Msg("issued node certificate")
	}
	n.ca, n.leaf = ca, leaf
	return nil
}

// nodeLeafRequest names a node's certificate: CN and DNS name the node's
// name, IPs loopback and its advertise address. The leader issues its own
// and joining nodes' certificates with it, so a node never names itself.
func nodeLeafRequest(name, advertiseAddress string) pki.LeafRequest {
	ips := []net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("::1")}
	if ip := net.ParseIP(advertiseAddress); ip != nil && !ip.IsLoopback() {
		ips = append(ips, ip)
	}
	return pki.LeafRequest{CommonName: name, DNSNames: []string{name, "localhost"}, IPs: ips}
}

// loadWorkerPKI reads a joined node's CA certificate (it has no CA key) and
// its own certificate.
func (n *Node) loadWorkerPKI() error {
	caPaths, nodePaths := pki.PathsIn(n.dir.pkiDir(), "ca"), pki.PathsIn(n.dir.pkiDir(), "node")
	caPEM, err := os.ReadFile(caPaths.Cert)
	if err != nil {
		return fmt.Errorf("read the cluster CA: %w", err)
	}
	caCert, err := pki.ParseCertificate(caPEM)
	if err != nil {
		return fmt.Errorf("read the cluster CA %s: %w", caPaths.Cert, err)
	}
	certPEM, err := os.ReadFile(nodePaths.Cert)
	if err != nil {
		return fmt.Errorf("read the node certificate: %w", err)
	}
	keyPEM, err := os.ReadFile(nodePaths.Key)
	if err != nil {
		return fmt.Errorf("read the node key: %w", err)
	}
	n.ca, n.leaf = &pki.CA{Cert: caCert, CertPEM: caPEM}, &pki.Leaf{CertPEM: certPEM, KeyPEM: keyPEM}
	return nil
}
