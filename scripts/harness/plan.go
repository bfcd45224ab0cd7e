package harness

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// DefaultPool is where Up chooses a host subnet when Options.Subnet is unset.
var DefaultPool = netip.MustParsePrefix("172.30.0.0/16")

// MaxHosts is the most hosts one harness makes: enough for any test on one
// machine, and "kh-" + 8 hex digits + "-200" fits Linux's 15-byte link names.
const MaxHosts = 200

// commentPrefix starts the comment of the harness NAME's iptables rule:
// "kat-harness NAME".
const commentPrefix = "kat-harness "

var nameRE = regexp.MustCompile(`^[a-z0-9][a-z0-9-]{0,31}$`)

// plan computes every name, address and directory of a harness from its
// options and the subnet, without touching the machine.
func plan(name string, hosts int, subnet netip.Prefix, stateDir string) (*Cluster, error) {
	if !nameRE.MatchString(name) {
		return nil, fmt.Errorf("harness name %q: want 1 to 32 of a-z, 0-9 and -, starting with a letter or digit", name)
	}
	if hosts < 1 || hosts > MaxHosts {
		return nil, fmt.Errorf("harness %s: %d hosts, want 1 to %d", name, hosts, MaxHosts)
	}
	if !subnet.IsValid() || !subnet.Addr().Is4() {
		return nil, fmt.Errorf("harness %s: subnet %v is not an IPv4 prefix", name, subnet)
	}
	subnet = subnet.Masked()
	// The network address, the bridge, the hosts and the broadcast address.
	if room := 1 << (32 - subnet.Bits()); room < hosts+3 {
		return nil, fmt.Errorf("harness %s: subnet %v holds %d addresses, too few for a bridge and %d hosts", name, subnet, room, hosts)
	}
	if stateDir == "" {
		return nil, fmt.Errorf("harness %s: no state directory", name)
	}
	stateDir, err := filepath.Abs(stateDir)
	if err != nil {
		return nil, fmt.Errorf("harness %s: %w", name, err)
	}
	id := linkID(name)
	gw := subnet.Addr().Next()
	c := &Cluster{
		Name:     name,
		StateDir: stateDir,
		Bridge:   "kh-" + id,
		Subnet:   subnet,
		Gateway:  gw,
	}
	addr := gw
	for i := 1; i <= hosts; i++ {
		addr = addr.Next()
		hostName := "node" + strconv.Itoa(i)
		dir := filepath.Join(stateDir, hostName)
		c.Hosts = append(c.Hosts, Host{
			Name:             hostName,
			Netns:            name + "-" + hostName,
			Iface:            "eth0",
			Addr:             addr,
			Prefix:           netip.PrefixFrom(addr, subnet.Bits()),
			VethHost:         fmt.Sprintf("kh-%s-%d", id, i),
			WGIface:          fmt.Sprintf("kw-%s-%d", id, i),
			Dir:              dir,
			DataDir:          filepath.Join(dir, "data"),
			PodmanRoot:       filepath.Join(dir, "podman", "root"),
			RunRoot:          filepath.Join(dir, "podman", "run"),
			NetworkConfigDir: filepath.Join(dir, "podman", "networks"),
			TmpDir:           filepath.Join(dir, "tmp"),
		})
	}
	if last := c.Hosts[len(c.Hosts)-1].RunRoot; len(last) > MaxRunRoot {
		return nil, fmt.Errorf("harness %s: run root %s is longer than the %d characters Podman accepts: choose a shorter state directory", name, last, MaxRunRoot)
	}
	c.Rules = []Rule{{
		Table: "filter",
		Chain: "FORWARD",
		Spec:  []string{"-i", c.Bridge, "-o", c.Bridge, "-m", "comment", "--comment", commentPrefix + name, "-j", "ACCEPT"},
	}}
	return c, nil
}

// MaxRunRoot is the longest run root Podman accepts ("the specified
// runroot is longer than 50 characters"); a host's is
// StateDir/nodeN/podman/run.
const MaxRunRoot = 50

// linkID is the part of the harness's link names that stands for its name:
// 8 hex digits of its SHA-256, so that "kh-" + id + "-" + host stays within
// 15 bytes whatever the name.
func linkID(name string) string {
	sum := sha256.Sum256([]byte(name))
	return hex.EncodeToString(sum[:4])
}

// errNoSubnet is returned by chooseSubnet when every candidate is in use.
var errNoSubnet = errors.New("harness: no free subnet")

// chooseSubnet returns the first /24 of pool, starting at the one the
// harness name hashes to and wrapping around, that overlaps none of used.
// Starting at the name's own candidate keeps harnesses with different names
// apart even before the first one's routes exist.
func chooseSubnet(pool netip.Prefix, name string, used []netip.Prefix) (netip.Prefix, error) {
	pool = pool.Masked()
	if !pool.Addr().Is4() || pool.Bits() > 24 {
		return netip.Prefix{}, fmt.Errorf("harness: pool %v is not an IPv4 prefix of /24 or shorter", pool)
	}
	n := uint32(1) << (24 - pool.Bits())
	sum := sha256.Sum256([]byte(name))
	start := binary.BigEndian.Uint32(sum[4:8]) % n
	base := binary.BigEndian.Uint32(pool.Addr().AsSlice())
	for i := range n {
		idx := (start + i) % n
		var b [4]byte
		binary.BigEndian.PutUint32(b[:], base+idx<<8)
		cand := netip.PrefixFrom(netip.AddrFrom4(b), 24)
		if !overlapsAny(cand, used) {
			return cand, nil
		}
	}
	return netip.Prefix{}, fmt.Errorf("%w in %v: every /24 overlaps an address or route of this machine", errNoSubnet, pool)
}

func overlapsAny(p netip.Prefix, used []netip.Prefix) bool {
	for _, u := range used {
		if p.Overlaps(u) {
			return true
		}
	}
	return false
}

// routeTypes are the words `ip route` may print before a route's prefix.
var routeTypes = map[string]bool{
	"unicast": true, "local": true, "broadcast": true, "multicast": true, "throw": true,
	"unreachable": true, "prohibit": true, "blackhole": true, "nat": true, "anycast": true,
}

// parseRoutes returns the destination of every line of
// `ip -4 route show table all`, skipping default routes, which cover every
// subnet and conflict with none.
func parseRoutes(out string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		if len(f) > 0 && routeTypes[f[0]] {
			f = f[1:]
		}
		if len(f) == 0 || f[0] == "default" {
			continue
		}
		p, err := parsePrefixOrAddr(f[0])
		if err != nil {
			return nil, fmt.Errorf("route %q: %w", strings.TrimSpace(line), err)
		}
		ps = append(ps, p)
	}
	return ps, nil
}

// parseAddrs returns the prefix of every address of `ip -4 -o addr show`
// ("2: eth0    inet 192.0.2.2/24 brd ...").
func parseAddrs(out string) ([]netip.Prefix, error) {
	var ps []netip.Prefix
	for line := range strings.Lines(out) {
		f := strings.Fields(line)
		for i := 0; i+1 < len(f); i++ {
			if f[i] != "inet" {
				continue
			}
			p, err := parsePrefixOrAddr(f[i+1])
			if err != nil {
				return nil, fmt.Errorf("address %q: %w", strings.TrimSpace(line), err)
			}
			ps = append(ps, p.Masked())
			break
		}
	}
	return ps, nil
}

func parsePrefixOrAddr(s string) (netip.Prefix, error) {
	if strings.Contains(s, "/") {
		p, err := netip.ParsePrefix(s)
		return p.Masked(), err
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}
