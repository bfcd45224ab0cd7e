// Package haproxy drives HAProxy as KAT's ingress proxy (docs/architecture.md
// "Ingress"): the static configuration an ingress proxy instance starts
// with, a client of HAProxy's runtime API over its admin socket, the
// parsing of that API's answers, and Plan, which turns the routes the
// leader derived into the runtime commands that bring HAProxy to them
// without a reload.
//
// The configuration never changes with the routes: a frontend looks up
// "host+path" in two maps, exact.map (a rule's own path) and prefix.map
// (everything under it, longest prefix first), then the same with the
// first label of the host replaced by "*" for wildcard rules, and routes
// to one of a pool of backends (kat_b000, ...) that start empty. Routes are
// map entries; backends' servers are added, put in maintenance and deleted
// at run time. So a route change touches nothing else and closes no
// connection.
package haproxy
