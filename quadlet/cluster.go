package quadlet

import "net/netip"

// ClusterConfiguration is the content of cluster.kat, read once
// by "kat-agent init".
type ClusterConfiguration struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindClusterConfiguration.
	Kind string `json:"kind" yaml:"kind"`
	// Metadata.Name is required: an informational DNS label naming the
	// cluster. Metadata.Namespace must be empty.
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
	// Spec is required.
	Spec ClusterSpec `json:"spec" yaml:"spec"`
}

// ClusterSpec holds the cluster-wide parameters.
type ClusterSpec struct {
	// ClusterCIDR is required: the IPv4 network overlay addresses come from,
	// such as "10.100.0.0/16".
	ClusterCIDR string `json:"clusterCIDR" yaml:"clusterCIDR"`
	// ServiceCIDR is required: an IPv4 network for virtual service
	// addresses, not overlapping ClusterCIDR.
	ServiceCIDR string `json:"serviceCIDR" yaml:"serviceCIDR"`
	// NodeSubnetBits is the number of bits added to ClusterCIDR's prefix to
	// make each node's subnet (>= 1, prefix+bits <= 30). Default 7.
	NodeSubnetBits int `json:"nodeSubnetBits" yaml:"nodeSubnetBits"`
	// ClusterDomain is the DNS suffix of service names. Default
	// "kat.cluster.local".
	ClusterDomain string `json:"clusterDomain" yaml:"clusterDomain"`
	// AgentPort is the port agents listen on. Default 9116.
	AgentPort int `json:"agentPort" yaml:"agentPort"`
	// APIPort is the port the leader serves the API on. Default 9115.
	APIPort int `json:"apiPort" yaml:"apiPort"`
	// EtcdPeerPort is etcd's peer port. Default 2380.
	EtcdPeerPort int `json:"etcdPeerPort" yaml:"etcdPeerPort"`
	// EtcdClientPort is etcd's client port. Default 2379.
	EtcdClientPort int `json:"etcdClientPort" yaml:"etcdClientPort"`
	// EtcdMembers is the size of the embedded etcd quorum: the init node
	// and up to EtcdMembers-1 nodes that join with --etcd-peer; a further
	// --etcd-peer join is refused. 1, 3 or 5. Default 3. With more than
	// one, etcd's election timeout is 500 ms and, once a second member has
	// joined, the leader's lease 2 s, so that a member takes over within
	// about 4 s of the leader's death.
	EtcdMembers int `json:"etcdMembers" yaml:"etcdMembers"`
	// VolumeBasePath is where agents keep SimpleClusterStorage volumes.
	// Default "/var/lib/kat/volumes".
	VolumeBasePath string `json:"volumeBasePath" yaml:"volumeBasePath"`
	// ContainerLogMaxSize bounds each container's log on its node, in the
	// memory quantity syntax (at least 64Ki): once the log would pass it,
	// it starts afresh. Default "10Mi".
	ContainerLogMaxSize string `json:"containerLogMaxSize" yaml:"containerLogMaxSize"`
	// BackupPath is where the leader writes etcd snapshots. Default
	// "/var/lib/kat/backups".
	BackupPath string `json:"backupPath" yaml:"backupPath"`
	// BackupIntervalMinutes is the time between snapshots (>= 1). Default
	// 30.
	BackupIntervalMinutes int `json:"backupIntervalMinutes" yaml:"backupIntervalMinutes"`
	// BackupRetention is how many snapshots the leader keeps in BackupPath
	// (>= 1); older ones are deleted. Default 5.
	BackupRetention int `json:"backupRetention" yaml:"backupRetention"`
	// AgentTickSeconds is the agents' heartbeat interval (>= 1). Default 15.
	AgentTickSeconds int `json:"agentTickSeconds" yaml:"agentTickSeconds"`
	// NodeLossTimeoutSeconds is the silence after which a node is NotReady
	// (> AgentTickSeconds). Default 60.
	NodeLossTimeoutSeconds int `json:"nodeLossTimeoutSeconds" yaml:"nodeLossTimeoutSeconds"`
	// NodeCollectAfterSeconds is how long a node may stay NotReady before
	// the leader deletes it with everything it held (its registration,
	// instances, subnet, overlay peer and etcd user); 0 never does (>
	// nodeLossTimeoutSeconds, or 0). Default 86400, a day.
	NodeCollectAfterSeconds int `json:"nodeCollectAfterSeconds" yaml:"nodeCollectAfterSeconds"`
	// GitOps makes the leader follow a config repository. Default nil: no
	// repository is followed.
	GitOps *GitOpsConfig `json:"gitops,omitempty" yaml:"gitops,omitempty"`
}

// GitOpsConfig names the config repository the leader follows.
type GitOpsConfig struct {
	// Repository is required: an https://, http://, ssh:// or file:// URL,
	// or an scp-like address such as git@host:owner/repo.git. It must not
	// hold a password.
	Repository string `json:"repository" yaml:"repository"`
	// Branch is the branch to follow. Default "main".
	Branch string `json:"branch" yaml:"branch"`
	// Path is the directory of the repository holding the workload
	// directories, relative and without "..". Default ".".
	Path string `json:"path" yaml:"path"`
	// PollIntervalSeconds is the time between polls (>= 5). Default 30.
	PollIntervalSeconds int `json:"pollIntervalSeconds" yaml:"pollIntervalSeconds"`
	// WebhookSecretFile is an absolute path to a file holding the webhook
	// secret. Default none: webhooks are not accepted.
	WebhookSecretFile string `json:"webhookSecretFile,omitempty" yaml:"webhookSecretFile,omitempty"`
	// TokenFile is an absolute path to a file holding an access token for
	// an http(s) repository (sent as the HTTP basic password). Default none.
	TokenFile string `json:"tokenFile,omitempty" yaml:"tokenFile,omitempty"`
	// SSHKeyFile and KnownHostsFile are absolute paths to a private key and a
	// known_hosts file for an ssh repository; both or neither. Default none.
	SSHKeyFile     string `json:"sshKeyFile,omitempty" yaml:"sshKeyFile,omitempty"`
	KnownHostsFile string `json:"knownHostsFile,omitempty" yaml:"knownHostsFile,omitempty"`
	// KeyringFile is an absolute path to an armored PGP public keyring; when
	// set, only commits signed by one of its keys are applied. Default none.
	KeyringFile string `json:"keyringFile,omitempty" yaml:"keyringFile,omitempty"`
}

// GitOpsFile is a file GitOpsConfig names: its field and path.
type GitOpsFile struct {
	Field, Path string
}

// Files lists the files g names (webhookSecretFile, tokenFile,
// sshKeyFile, knownHostsFile, keyringFile), those set only, in that order:
// the leader reads them.
func (g *GitOpsConfig) Files() []GitOpsFile {
	var out []GitOpsFile
	for _, f := range []GitOpsFile{
		{"webhookSecretFile", g.WebhookSecretFile}, {"tokenFile", g.TokenFile}, {"sshKeyFile", g.SSHKeyFile},
		{"knownHostsFile", g.KnownHostsFile}, {"keyringFile", g.KeyringFile},
	} {
		if f.Path != "" {
			out = append(out, f)
		}
	}
	return out
}

// Cluster defaults (docs/quadlet-reference.md lists them).
const (
	DefaultNodeSubnetBits         = 7
	DefaultClusterDomain          = "kat.cluster.local"
	DefaultAgentPort              = 9116
	DefaultAPIPort                = 9115
	DefaultEtcdPeerPort           = 2380
	DefaultEtcdClientPort         = 2379
	DefaultEtcdMembers            = 3
	DefaultVolumeBasePath         = "/var/lib/kat/volumes"
	DefaultContainerLogMaxSize    = "10Mi"
	minContainerLogMaxBytes       = 64 << 10
	DefaultBackupPath             = "/var/lib/kat/backups"
	DefaultBackupIntervalMinutes  = 30
	DefaultBackupRetention        = 5
	DefaultAgentTickSeconds       = 15
	DefaultNodeLossTimeoutSeconds = 60
	// DefaultNodeCollectAfterSeconds is a day.
	DefaultNodeCollectAfterSeconds = 86400
	DefaultGitOpsBranch            = "main"
	DefaultGitOpsPath              = "."
	DefaultPollIntervalSeconds     = 30
	minPollIntervalSeconds         = 5
)

// ParseClusterConfiguration parses a ClusterConfiguration file, applies its
// defaults and validates it. On failure the error is an ErrorList.
func ParseClusterConfiguration(file string, data []byte) (*ClusterConfiguration, error) {
	doc, errs := parseDocument(file, data)
	if errs != nil {
		return nil, errs.err()
	}
	var cc ClusterConfiguration
	c := doc.checker(&errs)
	c.checkHeader(KindClusterConfiguration)
	if doc.kind != KindClusterConfiguration {
		return nil, errs.err()
	}
	doc.decode(&cc)
	errs = append(errs, doc.errs...)
	defaultCluster(&cc.Spec, c)
	if c.required("metadata") {
		validateMeta(c, cc.Metadata)
		if cc.Metadata.Namespace != "" {
			c.errorf("metadata.namespace", "must not be set for a ClusterConfiguration")
		}
	}
	if c.required("spec") {
		validateCluster(c, &cc.Spec)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return &cc, nil
}

func defaultCluster(s *ClusterSpec, c *checker) {
	setDefault(c, "spec.nodeSubnetBits", &s.NodeSubnetBits, DefaultNodeSubnetBits)
	if s.ClusterDomain == "" {
		s.ClusterDomain = DefaultClusterDomain
	}
	setDefault(c, "spec.agentPort", &s.AgentPort, DefaultAgentPort)
	setDefault(c, "spec.apiPort", &s.APIPort, DefaultAPIPort)
	setDefault(c, "spec.etcdPeerPort", &s.EtcdPeerPort, DefaultEtcdPeerPort)
	setDefault(c, "spec.etcdClientPort", &s.EtcdClientPort, DefaultEtcdClientPort)
	setDefault(c, "spec.etcdMembers", &s.EtcdMembers, DefaultEtcdMembers)
	if s.VolumeBasePath == "" {
		s.VolumeBasePath = DefaultVolumeBasePath
	}
	if s.ContainerLogMaxSize == "" {
		s.ContainerLogMaxSize = DefaultContainerLogMaxSize
	}
	if s.BackupPath == "" {
		s.BackupPath = DefaultBackupPath
	}
	setDefault(c, "spec.backupIntervalMinutes", &s.BackupIntervalMinutes, DefaultBackupIntervalMinutes)
	setDefault(c, "spec.backupRetention", &s.BackupRetention, DefaultBackupRetention)
	setDefault(c, "spec.agentTickSeconds", &s.AgentTickSeconds, DefaultAgentTickSeconds)
	setDefault(c, "spec.nodeLossTimeoutSeconds", &s.NodeLossTimeoutSeconds, DefaultNodeLossTimeoutSeconds)
	setDefault(c, "spec.nodeCollectAfterSeconds", &s.NodeCollectAfterSeconds, DefaultNodeCollectAfterSeconds)
	if g := s.GitOps; g != nil {
		if g.Branch == "" {
			g.Branch = DefaultGitOpsBranch
		}
		if g.Path == "" {
			g.Path = DefaultGitOpsPath
		}
		setDefault(c, "spec.gitops.pollIntervalSeconds", &g.PollIntervalSeconds, DefaultPollIntervalSeconds)
	}
}

func validateCluster(c *checker, s *ClusterSpec) {
	clusterNet, okCluster := ipv4Network(c, "spec.clusterCIDR", s.ClusterCIDR)
	serviceNet, okService := ipv4Network(c, "spec.serviceCIDR", s.ServiceCIDR)
	if okCluster && okService && clusterNet.Overlaps(serviceNet) {
		c.errorf("spec.serviceCIDR", "%s overlaps clusterCIDR %s", serviceNet, clusterNet)
	}
	if s.NodeSubnetBits < 1 {
		c.errorf("spec.nodeSubnetBits", "must be at least 1, got %d", s.NodeSubnetBits)
	} else if okCluster && clusterNet.Bits()+s.NodeSubnetBits > 30 {
		c.errorf("spec.nodeSubnetBits", "%d bits on top of clusterCIDR %s make node subnets smaller than /30; use at most %d",
			s.NodeSubnetBits, clusterNet, 30-clusterNet.Bits())
	}
	c.check("spec.clusterDomain", s.ClusterDomain, domainName)
	ports := []struct {
		field string
		port  int
	}{
		{"agentPort", s.AgentPort}, {"apiPort", s.APIPort},
		{"etcdPeerPort", s.EtcdPeerPort}, {"etcdClientPort", s.EtcdClientPort},
	}
	used := map[int]string{}
	for _, p := range ports {
		path := "spec." + p.field
		if msg := portNumber(p.port); msg != "" {
			c.errorf(path, "%s", msg)
			continue
		}
		if other, dup := used[p.port]; dup {
			c.errorf(path, "port %d is already used by %s", p.port, other)
		}
		used[p.port] = p.field
	}
	if m := s.EtcdMembers; m != 1 && m != 3 && m != 5 {
		c.errorf("spec.etcdMembers", "must be 1, 3 or 5 (an odd quorum size), got %d", m)
	}
	c.check("spec.volumeBasePath", s.VolumeBasePath, cleanAbsPath)
	if n, err := ParseMemory(s.ContainerLogMaxSize); err != nil {
		c.errorf("spec.containerLogMaxSize", "%v", err)
	} else if n < minContainerLogMaxBytes {
		c.errorf("spec.containerLogMaxSize", "must be at least 64Ki, got %s", s.ContainerLogMaxSize)
	}
	c.check("spec.backupPath", s.BackupPath, cleanAbsPath)
	c.atLeast("spec.backupIntervalMinutes", s.BackupIntervalMinutes, 1)
	c.atLeast("spec.backupRetention", s.BackupRetention, 1)
	c.atLeast("spec.agentTickSeconds", s.AgentTickSeconds, 1)
	if s.NodeLossTimeoutSeconds <= s.AgentTickSeconds {
		c.errorf("spec.nodeLossTimeoutSeconds", "must be more than agentTickSeconds (%d), got %d", s.AgentTickSeconds, s.NodeLossTimeoutSeconds)
	}
	if n := s.NodeCollectAfterSeconds; n != 0 && n <= s.NodeLossTimeoutSeconds {
		c.errorf("spec.nodeCollectAfterSeconds", "must be more than nodeLossTimeoutSeconds (%d), or 0 (never), got %d", s.NodeLossTimeoutSeconds, n)
	}
	if g := s.GitOps; g != nil {
		const p = "spec.gitops"
		if c.required(p + ".repository") {
			c.check(p+".repository", g.Repository, gitURL)
		}
		c.check(p+".branch", g.Branch, gitRef)
		if g.Path != "." {
			c.check(p+".path", g.Path, relPath)
		}
		c.atLeast(p+".pollIntervalSeconds", g.PollIntervalSeconds, minPollIntervalSeconds)
		for _, f := range g.Files() {
			c.check(p+"."+f.Field, f.Path, cleanAbsPath)
		}
		if (g.SSHKeyFile == "") != (g.KnownHostsFile == "") {
			c.errorf(p, "sshKeyFile and knownHostsFile must be given together")
		}
		if g.TokenFile != "" && g.SSHKeyFile != "" {
			c.errorf(p+".tokenFile", "is for http(s) repositories; sshKeyFile is for ssh ones: give one")
		}
	}
}

// ipv4Network parses a required IPv4 CIDR written in its canonical form.
func ipv4Network(c *checker, path, s string) (netip.Prefix, bool) {
	if !c.required(path) {
		return netip.Prefix{}, false
	}
	p, err := netip.ParsePrefix(s)
	switch {
	case err != nil:
		c.errorf(path, "%q is not a CIDR such as 10.100.0.0/16", s)
	case !p.Addr().Is4():
		c.errorf(path, "%q must be an IPv4 network", s)
	case p.Masked() != p:
		c.errorf(path, "%q has host bits set (did you mean %s?)", s, p.Masked())
	default:
		return p, true
	}
	return netip.Prefix{}, false
}

// ClusterPrefix returns ClusterCIDR parsed; it is the zero Prefix if
// ClusterCIDR is invalid, which ParseClusterConfiguration never returns.
func (s *ClusterSpec) ClusterPrefix() netip.Prefix {
	p, _ := netip.ParsePrefix(s.ClusterCIDR)
	return p
}

// ServicePrefix returns ServiceCIDR parsed, like ClusterPrefix.
func (s *ClusterSpec) ServicePrefix() netip.Prefix {
	p, _ := netip.ParsePrefix(s.ServiceCIDR)
	return p
}

// Members is EtcdMembers, DefaultEtcdMembers for a spec saved before the
// field existed.
func (s *ClusterSpec) Members() int {
	if s.EtcdMembers == 0 {
		return DefaultEtcdMembers
	}
	return s.EtcdMembers
}

// ContainerLogMaxBytes is ContainerLogMaxSize in bytes; 0 when it is not a
// valid quantity (a spec ParseClusterConfiguration returned always is).
func (s *ClusterSpec) ContainerLogMaxBytes() int64 {
	n, err := ParseMemory(s.ContainerLogMaxSize)
	if err != nil {
		return 0
	}
	return n
}
