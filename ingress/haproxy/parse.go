package haproxy

import (
	"fmt"
	"strconv"
	"strings"
)

// Server is one server of a backend as HAProxy shows it.
type Server struct {
	// Addr is "ip:port".
	Addr string
	// Maint says an administrator (the agent) put it in maintenance: it
	// takes no new requests.
	Maint bool
}

// ParseMap parses the answer of "show map FILE": one "0xID key value" line
// per entry. It returns the entries by key.
func ParseMap(out string) (map[string]string, error) {
	m := map[string]string{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.Fields(line)
		if len(f) != 3 || !strings.HasPrefix(f[0], "0x") {
			return nil, fmt.Errorf("parse show map: unexpected line %q", cut(line))
		}
		m[f[1]] = f[2]
	}
	return m, nil
}

// ParseServersState parses the answer of "show servers state": a version
// line, a "# be_id be_name srv_id srv_name srv_addr ..." header naming the
// columns, then one line per server. It returns the servers by backend and
// name.
func ParseServersState(out string) (map[string]map[string]Server, error) {
	servers := map[string]map[string]Server{}
	var cols map[string]int
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		switch {
		case line == "":
			continue
		case strings.HasPrefix(line, "#"):
			cols = map[string]int{}
			for i, name := range strings.Fields(strings.TrimPrefix(line, "#")) {
				cols[name] = i
			}
			continue
		case cols == nil:
			continue // the version line
		}
		f := strings.Fields(line)
		get := func(name string) (string, error) {
			i, ok := cols[name]
			if !ok || i >= len(f) {
				return "", fmt.Errorf("parse show servers state: no column %s in %q", name, cut(line))
			}
			return f[i], nil
		}
		var v [5]string
		for i, name := range []string{"be_name", "srv_name", "srv_addr", "srv_port", "srv_admin_state"} {
			var err error
			if v[i], err = get(name); err != nil {
				return nil, err
			}
		}
		admin, err := strconv.Atoi(v[4])
		if err != nil {
			return nil, fmt.Errorf("parse show servers state: srv_admin_state %q is not a number", cut(v[4]))
		}
		if servers[v[0]] == nil {
			servers[v[0]] = map[string]Server{}
		}
		// srv_admin_state bit 0x01: forced maintenance.
		servers[v[0]][v[1]] = Server{Addr: v[2] + ":" + v[3], Maint: admin&1 != 0}
	}
	return servers, nil
}

// cut shortens outside input quoted in an error.
func cut(s string) string {
	if len(s) > 120 {
		return s[:120] + "..."
	}
	return s
}

// ParseSlots parses the answer of "show backend" (a "# name" header, then
// a backend name per line) and returns the size of the pool: the number of
// backends named SlotName(i) for i from 0 up without a gap.
func ParseSlots(out string) int {
	names := map[string]bool{}
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); line != "" && !strings.HasPrefix(line, "#") {
			names[line] = true
		}
	}
	n := 0
	for names[SlotName(n)] {
		n++
	}
	return n
}

// Proc is what the master's "show proc" says of its reloads.
type Proc struct {
	// Reloads counts the reloads asked for; Failed those whose new
	// configuration did not load (the workers before it kept serving).
	Reloads, Failed int
}

// ParseProc parses the answer of the master CLI's "show proc", whose
// master line reads "PID master RELOADS [failed: N] UPTIME VERSION".
func ParseProc(out string) (Proc, error) {
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) < 5 || f[1] != "master" || f[3] != "[failed:" {
			continue
		}
		reloads, err1 := strconv.Atoi(f[2])
		failed, err2 := strconv.Atoi(strings.TrimSuffix(f[4], "]"))
		if err1 != nil || err2 != nil {
			return Proc{}, fmt.Errorf("parse show proc: unexpected master line %q", cut(strings.TrimSpace(line)))
		}
		return Proc{Reloads: reloads, Failed: failed}, nil
	}
	return Proc{}, fmt.Errorf("parse show proc: no master line in %q", cut(out))
}
