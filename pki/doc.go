// Package pki is KAT's internal public-key infrastructure: the cluster CA, the
// certificates it issues, and the TLS configurations built from them.
//
// kat-agent init creates the CA once, in the data directory, together with the
// leader's certificate. Joining agents later send a CSR that the
// leader signs with [CA.SignCSR].
//
//	ca, err := pki.NewCA("kat-cluster-ca")
//	leaf, err := ca.Issue(pki.LeafRequest{CommonName: "node-1", IPs: ips})
//	cfg, err := pki.ServerTLSConfig(leaf, ca.Pool(), false)
//
// # Files
//
// Keys and certificates are PEM files. Private keys are written with mode
// 0600 and certificates with 0644, through a temporary file and a rename, so a
// crash never leaves half a key behind. [EnsureCA] and [EnsureLeaf] load what
// exists and create only what is missing, which is what makes running init a
// second time on the same data directory resume the same cluster.
//
// # Reloading
//
// A server that must pick up a renewed certificate, or a changed CA bundle,
// without a restart uses [ServerTLS]: its configuration reads the current
// files at every handshake (GetConfigForClient), and its Run watches them
// (internal/filewatch). A replacement that does not load keeps the last
// good certificate.
//
//	s, err := pki.NewServerTLS(pki.ServerFiles{Leaf: pki.PathsIn(dir, "node"), ClientCAFile: caFile,
//		ClientAuth: tls.RequireAndVerifyClientCert, Logger: log})
//	srv := &http.Server{TLSConfig: s.Config()}
//	go s.Run(ctx)
//
// # Algorithms
//
// All keys are ECDSA P-256. Certificates carry both server and client
// authentication usages because every node is both (mutual TLS).
package pki
