package runtime

import (
	"fmt"
	"net/netip"
	"path"
	"regexp"
	"slices"
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
	for k, v := range s.Sysctls {
		if !strings.HasPrefix(k, "net.") || strings.ContainsAny(k, "= \t\n") || strings.ContainsAny(v, "\n") {
			return bad("sysctls", "key %q is not a net. key of the container's network namespace, or its value holds a newline", k)
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

// specGen is the part of podman's container spec generator (the body of
// POST /containers/create, podman 4.3's specgen.SpecGenerator) the driver
// fills in. Besides the spec's own fields it sets what the podman CLI sends
// for `podman create` without further options, so that a container made
// through the service is the one the CLI would make.
type specGen struct {
	Name           string            `json:"name"`
	Image          string            `json:"image"`
	RawImageName   string            `json:"raw_image_name"`
	Entrypoint     []string          `json:"entrypoint,omitempty"`
	Command        []string          `json:"command,omitempty"`
	Env            map[string]string `json:"env,omitempty"`
	Labels         map[string]string `json:"labels"`
	Annotations    map[string]string `json:"annotations"`
	Hostname       string            `json:"hostname,omitempty"`
	StopTimeout    *uint             `json:"stop_timeout,omitempty"`
	RestartPolicy  string            `json:"restart_policy"`
	Systemd        string            `json:"systemd"`
	SdNotifyMode   string            `json:"sdnotifyMode"`
	HTTPProxy      bool              `json:"httpproxy"`
	ManagePassword bool              `json:"manage_password"`
	ImageVolumes   string            `json:"image_volume_mode"`
	SeccompPolicy  string            `json:"seccomp_policy"`
	Umask          string            `json:"umask"`
	CgroupsMode    string            `json:"cgroups_mode"`
	UseImageHosts  bool              `json:"use_image_hosts"`

	UserNS     namespace         `json:"userns"`
	IDMappings *idMappings       `json:"idmappings,omitempty"`
	NetNS      *namespace        `json:"netns,omitempty"`
	Networks   map[string]netw   `json:"Networks,omitempty"`
	Ports      []portMapping     `json:"portmappings,omitempty"`
	DNSServers []string          `json:"dns_server,omitempty"`
	DNSSearch  []string          `json:"dns_search,omitempty"`
	DNSOptions []string          `json:"dns_option,omitempty"`
	Sysctl     map[string]string `json:"sysctl,omitempty"`
	Mounts     []mount           `json:"mounts,omitempty"`
	Resources  *resources        `json:"resource_limits,omitempty"`
	Devices    []device          `json:"devices,omitempty"`
	LogConfig  *logConfig        `json:"log_configuration,omitempty"`
}

// device is a device of the container: a host path, or a CDI device's
// fully qualified name (vendor/class=name), which Podman resolves.
type device struct {
	Path string `json:"path"`
}

// logConfig is the container's log driver and the size its log rotates at.
type logConfig struct {
	Driver string `json:"driver,omitempty"`
	Size   int64  `json:"size,omitempty"`
}

type namespace struct {
	NSMode string `json:"nsmode,omitempty"`
}

type idMappings struct {
	UIDMap     []idMapEntry `json:"UIDMap"`
	GIDMap     []idMapEntry `json:"GIDMap"`
	AutoUserNs bool         `json:"AutoUserNs"`
}

type idMapEntry struct {
	ContainerID int64 `json:"container_id"`
	HostID      int64 `json:"host_id"`
	Size        int64 `json:"size"`
}

type netw struct {
	StaticIPs []string `json:"static_ips,omitempty"`
}

type portMapping struct {
	HostIP        string `json:"host_ip,omitempty"`
	ContainerPort int    `json:"container_port"`
	HostPort      int    `json:"host_port"`
	Range         int    `json:"range"`
	Protocol      string `json:"protocol"`
}

type mount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type resources struct {
	Memory *struct {
		Limit int64 `json:"limit"`
		Swap  int64 `json:"swap"`
	} `json:"memory,omitempty"`
	CPU *struct {
		Quota  int64  `json:"quota"`
		Period uint64 `json:"period"`
	} `json:"cpu,omitempty"`
}

// cpuPeriod is the CFS period podman's --cpus uses.
const cpuPeriod = 100000

// createSpec renders a valid spec as the service's container spec: what
// `podman create` with the corresponding flags sends (--pull never is the
// service's way anyway: it never pulls on create).
func (p *Podman) createSpec(s *ContainerSpec) specGen {
	g := specGen{
		Name: s.Name, Image: s.Image, RawImageName: s.Image, Entrypoint: s.Command, Command: s.Args,
		Labels:      map[string]string{LabelManaged: "true"},
		Annotations: map[string]string{"io.kubernetes.cri-o.TTY": "false"},
		Hostname:    s.Hostname, RestartPolicy: "no", Systemd: "true", SdNotifyMode: "container", HTTPProxy: true,
		ManagePassword: true, ImageVolumes: "anonymous", SeccompPolicy: "default", Umask: "0022", CgroupsMode: "enabled",
	}
	for k, v := range s.Labels {
		if k != LabelManaged {
			g.Labels[k] = v
		}
	}
	if len(s.Env) > 0 {
		g.Env = make(map[string]string, len(s.Env))
		for _, e := range s.Env {
			g.Env[e.Name] = e.Value
		}
	}
	if m := s.IDMap; m != nil {
		ids := []idMapEntry{{ContainerID: 0, HostID: m.HostBase, Size: IDMapSize}}
		g.UserNS, g.IDMappings = namespace{NSMode: "private"}, &idMappings{UIDMap: ids, GIDMap: ids}
	} else {
		mode := p.userNS(s)
		g.UserNS = namespace{NSMode: mode}
		if mode == "auto" || strings.HasPrefix(mode, "auto:") {
			g.IDMappings = &idMappings{AutoUserNs: true}
		}
	}
	for _, pm := range s.Ports {
		host := pm.HostPort
		if host == 0 {
			host = pm.ContainerPort
		}
		proto := strings.ToLower(pm.Protocol)
		if proto == "" {
			proto = "tcp"
		}
		ip := strings.TrimSuffix(strings.TrimPrefix(pm.HostIP, "["), "]")
		g.Ports = append(g.Ports, portMapping{HostIP: ip, ContainerPort: pm.ContainerPort, HostPort: host, Range: 1, Protocol: proto})
	}
	for _, m := range s.Mounts {
		mt := mount{Destination: m.Target, Type: "bind", Source: m.Source}
		if m.ReadOnly {
			mt.Options = append(mt.Options, "ro")
		}
		if m.Chown {
			mt.Options = append(mt.Options, "U")
		}
		g.Mounts = append(g.Mounts, mt)
	}
	if s.CPUMillis > 0 || s.MemoryBytes > 0 {
		g.Resources = &resources{}
	}
	if s.CPUMillis > 0 {
		g.Resources.CPU = &struct {
			Quota  int64  `json:"quota"`
			Period uint64 `json:"period"`
		}{Quota: s.CPUMillis * cpuPeriod / 1000, Period: cpuPeriod}
	}
	if s.MemoryBytes > 0 {
		// As the CLI: swap twice the memory limit (memory plus as much
		// swap).
		g.Resources.Memory = &struct {
			Limit int64 `json:"limit"`
			Swap  int64 `json:"swap"`
		}{Limit: s.MemoryBytes, Swap: 2 * s.MemoryBytes}
	}
	if s.Network != "" {
		n := netw{}
		if s.IP.IsValid() {
			n.StaticIPs = []string{s.IP.String()}
		}
		g.NetNS, g.Networks = &namespace{NSMode: "bridge"}, map[string]netw{s.Network: n}
	}
	for _, ip := range s.DNS {
		g.DNSServers = append(g.DNSServers, ip.String())
	}
	g.DNSSearch, g.DNSOptions = s.DNSSearch, s.DNSOptions
	for _, d := range s.Devices {
		g.Devices = append(g.Devices, device{Path: d})
	}
	if s.LogMaxSize > 0 {
		g.LogConfig = &logConfig{Driver: "k8s-file", Size: s.LogMaxSize}
	}
	if len(s.Sysctls) > 0 {
		g.Sysctl = s.Sysctls
	}
	if s.StopTimeout > 0 {
		t := uint(ceilSeconds(s.StopTimeout))
		g.StopTimeout = &t
	}
	return g
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
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
