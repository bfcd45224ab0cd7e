package runtime

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

var (
	containerNameRE = regexp.MustCompile(`^[a-zA-Z0-9][a-zA-Z0-9_.-]*$`)
	envNameRE       = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)
	// dnsNameRE is a domain name of letters, digits and '-' labels.
	dnsNameRE   = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?(\.[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*\.?$`)
	dnsOptionRE = regexp.MustCompile(`^[a-z][a-z0-9-]*(:[0-9]+)?$`)
	// cdiDeviceRE is a fully qualified CDI device name: vendor (a domain
	// name), class and device name, as the CDI specification spells them.
	cdiDeviceRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]*/[A-Za-z0-9][A-Za-z0-9_-]*=[A-Za-z0-9][A-Za-z0-9_.:-]*$`)
)

// Validate checks a spec without running anything. Its errors wrap
// ErrInvalidSpec and name the field.
func (s *ContainerSpec) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Name == "":
		return bad("name", "is required")
	case len(s.Name) > 253 || !containerNameRE.MatchString(s.Name):
		return bad("name", "%q is not a valid container name (letters, digits, '_', '.', '-', starting with a letter or digit, at most 253)", s.Name)
	case strings.TrimSpace(s.Image) == "":
		return bad("image", "is required")
	case strings.ContainsAny(s.Image, " \t\n"):
		return bad("image", "%q contains white space", s.Image)
	case s.CPUMillis < 0:
		return bad("cpuMillis", "%d is negative", s.CPUMillis)
	case s.MemoryBytes < 0:
		return bad("memoryBytes", "%d is negative", s.MemoryBytes)
	case s.MemoryBytes > 0 && s.MemoryBytes < 6<<20:
		return bad("memoryBytes", "%d is below podman's minimum of 6MiB", s.MemoryBytes)
	case s.StopTimeout < 0:
		return bad("stopTimeout", "%s is negative", s.StopTimeout)
	case s.LogMaxSize < 0:
		return bad("logMaxSize", "%d is negative", s.LogMaxSize)
	case strings.ContainsAny(s.UserNS, " \t\n"):
		return bad("userNS", "%q contains white space", s.UserNS)
	case s.IDMap != nil && s.IDMap.HostBase <= 0:
		return bad("idMap.hostBase", "%d is not above 0 (container root must not be host root)", s.IDMap.HostBase)
	case s.IDMap != nil && s.UserNS != "":
		return bad("idMap", "is set together with userNS %q", s.UserNS)
	}
	seen := map[string]bool{}
	for i, e := range s.Env {
		if !envNameRE.MatchString(e.Name) {
			return bad(fmt.Sprintf("env[%d].name", i), "%q is not a valid variable name", e.Name)
		}
		if seen[e.Name] {
			return bad(fmt.Sprintf("env[%d].name", i), "%q is set twice", e.Name)
		}
		seen[e.Name] = true
		if strings.ContainsRune(e.Value, 0) {
			return bad(fmt.Sprintf("env[%d].value", i), "contains a NUL byte")
		}
	}
	for k := range s.Labels {
		if k == "" || strings.ContainsAny(k, "= \t\n") {
			return bad("labels", "key %q is empty or contains '=' or white space", k)
		}
	}
	for i, pm := range s.Ports {
		f := fmt.Sprintf("ports[%d]", i)
		switch {
		case pm.ContainerPort < 1 || pm.ContainerPort > 65535:
			return bad(f+".containerPort", "%d is out of range (1-65535)", pm.ContainerPort)
		case pm.HostPort < 0 || pm.HostPort > 65535:
			return bad(f+".hostPort", "%d is out of range (1-65535, or 0 for the container port)", pm.HostPort)
		}
		if p := strings.ToLower(pm.Protocol); p != "" && p != "tcp" && p != "udp" {
			return bad(f+".protocol", "%q is not tcp or udp", pm.Protocol)
		}
		if pm.HostIP != "" && !validIP(pm.HostIP) {
			return bad(f+".hostIP", "%q is not an IP address", pm.HostIP)
		}
	}
	if err := s.validateNetwork(); err != nil {
		return err
	}
	for i, d := range s.Devices {
		if !cdiDeviceRE.MatchString(d) {
			return bad(fmt.Sprintf("devices[%d]", i), "%q is not a CDI device name (vendor/class=name, for example nvidia.com/gpu=0)", d)
		}
	}
	targets := map[string]bool{}
	for i, m := range s.Mounts {
		f := fmt.Sprintf("mounts[%d]", i)
		for _, p := range []struct{ field, val string }{{"source", m.Source}, {"target", m.Target}} {
			switch {
			case !path.IsAbs(p.val):
				return bad(f+"."+p.field, "%q is not an absolute path", p.val)
			case strings.ContainsAny(p.val, ",\n"):
				return bad(f+"."+p.field, "%q contains ',' or a newline, which podman --mount cannot express", p.val)
			}
		}
		t := path.Clean(m.Target)
		if targets[t] {
			return bad(f+".target", "%q is mounted twice", m.Target)
		}
		targets[t] = true
	}
	return nil
}

// validateNetwork checks the network and DNS fields.
func (s *ContainerSpec) validateNetwork() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Network != "" && (len(s.Network) > 253 || !containerNameRE.MatchString(s.Network)):
		return bad("network", "%q is not a valid network name", s.Network)
	case s.IP.IsValid() && s.Network == "":
		return bad("ip", "%s is set without a network", s.IP)
	case s.IP.IsValid() && (!s.IP.Is4() || s.IP.IsUnspecified()):
		return bad("ip", "%s is not a unicast IPv4 address", s.IP)
	}
	for i, ip := range s.DNS {
		if !ip.IsValid() || ip.IsUnspecified() {
			return bad(fmt.Sprintf("dns[%d]", i), "%v is not a nameserver address", ip)
		}
	}
	for i, d := range s.DNSSearch {
		if len(d) > 253 || !dnsNameRE.MatchString(d) {
			return bad(fmt.Sprintf("dnsSearch[%d]", i), "%q is not a domain name", d)
		}
	}
	for i, o := range s.DNSOptions {
		if !dnsOptionRE.MatchString(o) {
			return bad(fmt.Sprintf("dnsOptions[%d]", i), "%q is not a resolv.conf option (name or name:number)", o)
		}
	}
	return nil
}

func validIP(s string) bool {
	_, err := netip.ParseAddr(strings.TrimSuffix(strings.TrimPrefix(s, "["), "]"))
	return err == nil
}

// createArgs renders a valid spec as podman create's arguments.
func (p *Podman) createArgs(s *ContainerSpec) []string {
	args := []string{"create", "--name", s.Name, "--pull", "never", "--restart", "no"}
	if m := s.IDMap; m != nil {
		idmap := "0:" + strconv.FormatInt(m.HostBase, 10) + ":" + strconv.Itoa(IDMapSize)
		args = append(args, "--uidmap", idmap, "--gidmap", idmap)
	} else {
		args = append(args, "--userns", p.userNS(s))
	}
	args = append(args, "--label", LabelManaged+"=true")
	for _, k := range sortedKeys(s.Labels) {
		if k != LabelManaged {
			args = append(args, "--label", k+"="+s.Labels[k])
		}
	}
	for _, e := range s.Env {
		args = append(args, "--env", e.Name+"="+e.Value)
	}
	for _, pm := range s.Ports {
		args = append(args, "--publish", publishArg(pm))
	}
	for _, m := range s.Mounts {
		v := "type=bind,source=" + m.Source + ",destination=" + m.Target
		if m.ReadOnly {
			v += ",ro=true"
		}
		if m.Chown {
			v += ",U=true"
		}
		args = append(args, "--mount", v)
	}
	if s.CPUMillis > 0 {
		args = append(args, "--cpus", strconv.FormatFloat(float64(s.CPUMillis)/1000, 'f', -1, 64))
	}
	if s.MemoryBytes > 0 {
		args = append(args, "--memory", strconv.FormatInt(s.MemoryBytes, 10)+"b")
	}
	if s.Hostname != "" {
		args = append(args, "--hostname", s.Hostname)
	}
	if s.Network != "" {
		args = append(args, "--network", s.Network)
	}
	if s.IP.IsValid() {
		args = append(args, "--ip", s.IP.String())
	}
	for _, ip := range s.DNS {
		args = append(args, "--dns", ip.String())
	}
	for _, d := range s.DNSSearch {
		args = append(args, "--dns-search", d)
	}
	for _, o := range s.DNSOptions {
		args = append(args, "--dns-option", o)
	}
	for _, d := range s.Devices {
		args = append(args, "--device", d)
	}
	if s.LogMaxSize > 0 {
		args = append(args, "--log-driver", "k8s-file", "--log-opt", "max-size="+strconv.FormatInt(s.LogMaxSize, 10))
	}
	if s.StopTimeout > 0 {
		args = append(args, "--stop-timeout", strconv.Itoa(ceilSeconds(s.StopTimeout)))
	}
	if len(s.Command) > 0 {
		args = append(args, "--entrypoint", jsonArray(s.Command))
	}
	args = append(args, "--", s.Image)
	return append(args, s.Args...)
}

func publishArg(pm PortMapping) string {
	host := pm.HostPort
	if host == 0 {
		host = pm.ContainerPort
	}
	proto := strings.ToLower(pm.Protocol)
	if proto == "" {
		proto = "tcp"
	}
	v := fmt.Sprintf("%d:%d/%s", host, pm.ContainerPort, proto)
	if pm.HostIP != "" {
		ip := pm.HostIP
		if strings.Contains(ip, ":") && !strings.HasPrefix(ip, "[") {
			ip = "[" + ip + "]"
		}
		v = ip + ":" + v
	}
	return v
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// jsonArray renders ss as a JSON array, the form of --entrypoint that keeps
// each element one argument.
func jsonArray(ss []string) string {
	b, err := json.Marshal(ss)
	if err != nil {
		panic(err) // strings always marshal
	}
	return string(b)
}

// ceilSeconds rounds d up to whole seconds.
func ceilSeconds(d time.Duration) int {
	return int((d + time.Second - 1) / time.Second)
}

// userNS returns the --userns of a spec without an IDMap.
func (p *Podman) userNS(s *ContainerSpec) string {
	if s.UserNS != "" {
		return s.UserNS
	}
	return p.cfg.DefaultUserNS
}
