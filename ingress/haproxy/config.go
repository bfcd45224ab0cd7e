package haproxy

import (
	"bytes"
	"fmt"
	"text/template"
)

// RunDir is where the proxy container sees its run directory: the
// configuration, the maps and the sockets.
const RunDir = "/run/kat-ingress"

// The files of the run directory. The runtime API names a map by the path
// the configuration loaded it from: the directory as HAProxy sees it.
const (
	ConfigFile = "haproxy.cfg"
	AdminSock  = "admin.sock"
	MasterSock = "master.sock"
	ExactMap   = "exact.map"
	PrefixMap  = "prefix.map"
)

// DefaultSlots is the number of backends of the pool a proxy starts with:
// one per workload and port that some route names. The pool doubles when
// it is full (Grow).
const DefaultSlots = 64

// SlotsFor is the size of a pool that holds backends: DefaultSlots,
// doubled as often as needed.
func SlotsFor(backends int) int {
	n := DefaultSlots
	for n < backends {
		n *= 2
	}
	return n
}

// Config is what the static configuration depends on.
type Config struct {
	// Dir is the run directory as HAProxy sees it. Default RunDir.
	Dir string
	// HTTPPort is the container port HAProxy serves HTTP on (the port named
	// http of the proxy's VirtualLoadBalancer).
	HTTPPort int
	// Slots is the size of the backend pool. Default DefaultSlots.
	Slots int
}

// SlotName is the name of backend i of the pool.
func SlotName(i int) string { return fmt.Sprintf("kat_b%03d", i) }

var configTemplate = template.Must(template.New("haproxy.cfg").Parse(`# Written by the KAT agent; routes and servers change at run time, not here.
global
    master-worker
    stats socket {{.RunDir}}/admin.sock mode 600 level admin expose-fd listeners
    stats timeout 10s
    log stdout format raw local0 info

defaults
    mode http
    log global
    option httplog
    option dontlognull
    option forwardfor
    option redispatch 1
    retries 3
    retry-on conn-failure empty-response
    timeout connect 1s
    timeout client 60s
    timeout server 60s
    timeout http-request 10s
    timeout http-keep-alive 10s
    timeout tunnel 1h

frontend kat_http
    bind :{{.HTTPPort}}
    http-request set-var(txn.host) req.hdr(host),host_only,lower
    http-request set-var(txn.path) path
    http-request set-var(txn.key) var(txn.host),concat(,txn.path)
    http-request set-var(txn.wkey) var(txn.host),regsub(^[^.]+,*),concat(,txn.path)
    http-request set-header X-Forwarded-Proto http
    use_backend %[var(txn.key),map_str({{.Exact}})] if { var(txn.key),map_str({{.Exact}}) -m found }
    use_backend %[var(txn.key),map_beg({{.Prefix}})] if { var(txn.key),map_beg({{.Prefix}}) -m found }
    use_backend %[var(txn.wkey),map_str({{.Exact}})] if { var(txn.wkey),map_str({{.Exact}}) -m found }
    use_backend %[var(txn.wkey),map_beg({{.Prefix}})] if { var(txn.wkey),map_beg({{.Prefix}}) -m found }
    default_backend kat_none

backend kat_none
    http-request return status 404 content-type text/plain string "no ingress route for this host and path\n"
`))

// Pool returns the configuration of the pool's backends from to to-1:
// Render ends with the pool's first slots, and Grow appends more.
func Pool(from, to int) []byte {
	var b bytes.Buffer
	for i := from; i < to; i++ {
		fmt.Fprintf(&b, "\nbackend %s\n    balance roundrobin\n", SlotName(i))
	}
	return b.Bytes()
}

// Render returns the static configuration.
func Render(c Config) ([]byte, error) {
	if c.HTTPPort < 1 || c.HTTPPort > 65535 {
		return nil, fmt.Errorf("render haproxy.cfg: http port %d is not a port", c.HTTPPort)
	}
	if c.Slots <= 0 {
		c.Slots = DefaultSlots
	}
	if c.Dir == "" {
		c.Dir = RunDir
	}
	var b bytes.Buffer
	err := configTemplate.Execute(&b, map[string]any{
		"RunDir": c.Dir, "HTTPPort": c.HTTPPort, "Exact": c.Dir + "/" + ExactMap, "Prefix": c.Dir + "/" + PrefixMap,
	})
	if err != nil {
		return nil, fmt.Errorf("render haproxy.cfg: %w", err)
	}
	b.Write(Pool(0, c.Slots))
	return b.Bytes(), nil
}
