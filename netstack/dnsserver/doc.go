// Package dnsserver is the agent's DNS server: it answers the names of the
// cluster domain from an in-memory zone that a watch of /kat/dns/ keeps
// current, and forwards every other name to the host's resolvers through a
// small cache (docs/architecture.md "DNS").
//
//	h := dnsserver.NewHandler(dnsserver.HandlerConfig{Domain: "kat.cluster.local", Upstreams: ups, Sources: srcs})
//	go dnsserver.FeedZone(ctx, st, h, 0)            // the zone from etcd
//	srv := dnsserver.NewServer("10.100.0.1:53", h)  // UDP and TCP
//	err := srv.Run(ctx)
//
// # Names
//
// Under the cluster domain D, from the records the leader writes
// (api.DNSRecord):
//
//	{workload}.{ns}.D                   A of every ready instance, rotated per query
//	{instanceID}.{workload}.{ns}.D      A of one instance
//	_{port}._{tcp|udp}.{workload}.{ns}.D SRV of every ready instance's named port,
//	                                     the instances' A records as additionals
//	D                                   SOA
//
// Positive answers live TTL (5 s): instances move. A name of D that does
// not exist is NXDOMAIN, a name that exists without the asked type is
// NODATA, both with D's SOA (TTL and minimum 5 s) for negative caching.
//
// # Short names
//
// A query from a container the node runs (its source address is an
// instance address; Sources says whose) for a name outside D is first
// tried as {name}.{ns}.D in the container's namespace, then as it is:
// "web" from a container of namespace shop finds
// web.shop.D.
//
// # Forwarding
//
// Other names go to the upstream resolvers (HostUpstreams reads the host's
// /etc/resolv.conf), never names of D. Answers are cached by name, type and
// class for their smallest TTL up to 30 s, negative ones up to 5 s; a
// truncated UDP answer is asked again over TCP; when no upstream answers,
// the client gets SERVFAIL.
//
// # Abuse
//
// Only class IN is answered, ANY and zone transfers are refused, and every
// UDP answer is cut (with TC set) to the client's EDNS0 buffer size, 512
// bytes without EDNS0, so the server amplifies little.
package dnsserver
