package quadlet

import (
	"errors"
	"strings"
	"testing"
)

const minimalCluster = `apiVersion: kat.dws.rip/v1alpha1
kind: ClusterConfiguration
metadata:
  name: homelab
spec:
  clusterCIDR: 10.100.0.0/16
  serviceCIDR: 10.200.0.0/16
`

func TestParseClusterConfigurationDefaults(t *testing.T) {
	t.Parallel()
	cc, err := ParseClusterConfiguration("cluster.kat", []byte(minimalCluster))
	if err != nil {
		t.Fatal(err)
	}
	want := ClusterSpec{
		ClusterCIDR:             "10.100.0.0/16",
		ServiceCIDR:             "10.200.0.0/16",
		NodeSubnetBits:          7,
		ClusterDomain:           "kat.cluster.local",
		AgentPort:               9116,
		APIPort:                 9115,
		EtcdPeerPort:            2380,
		EtcdClientPort:          2379,
		EtcdMembers:             3,
		VolumeBasePath:          "/var/lib/kat/volumes",
		ContainerLogMaxSize:     "10Mi",
		BackupPath:              "/var/lib/kat/backups",
		BackupIntervalMinutes:   30,
		BackupRetention:         5,
		AgentTickSeconds:        15,
		NodeLossTimeoutSeconds:  60,
		NodeCollectAfterSeconds: 86400,
	}
	if cc.Spec != want {
		t.Errorf("spec = %+v\nwant   %+v", cc.Spec, want)
	}
	if cc.Metadata.Name != "homelab" {
		t.Errorf("name = %q", cc.Metadata.Name)
	}
	if got := cc.Spec.ClusterPrefix().String(); got != "10.100.0.0/16" {
		t.Errorf("ClusterPrefix = %s", got)
	}
	if got := cc.Spec.ContainerLogMaxBytes(); got != 10<<20 {
		t.Errorf("ContainerLogMaxBytes = %d", got)
	}
	if got := cc.Spec.ServicePrefix().Bits(); got != 16 {
		t.Errorf("ServicePrefix bits = %d", got)
	}
}

func TestParseClusterConfigurationGitOps(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want GitOpsConfig
	}{
		{
			name: "defaults",
			yaml: "  gitops:\n    repository: https://git.example.com/ops/cluster.git\n",
			want: GitOpsConfig{Repository: "https://git.example.com/ops/cluster.git", Branch: "main", Path: ".", PollIntervalSeconds: 30},
		},
		{
			name: "everything set",
			yaml: "  gitops:\n    repository: git@github.com:ops/cluster.git\n    branch: prod\n    path: clusters/home\n    pollIntervalSeconds: 5\n    webhookSecretFile: /etc/kat/webhook.secret\n",
			want: GitOpsConfig{Repository: "git@github.com:ops/cluster.git", Branch: "prod", Path: "clusters/home", PollIntervalSeconds: 5, WebhookSecretFile: "/etc/kat/webhook.secret"},
		},
		{
			name: "credentials and keyring",
			yaml: "  gitops:\n    repository: ssh://git@example.com/ops/cluster.git\n    sshKeyFile: /etc/kat/id_ed25519\n    knownHostsFile: /etc/kat/known_hosts\n    keyringFile: /etc/kat/trusted.asc\n",
			want: GitOpsConfig{Repository: "ssh://git@example.com/ops/cluster.git", Branch: "main", Path: ".", PollIntervalSeconds: 30,
				SSHKeyFile: "/etc/kat/id_ed25519", KnownHostsFile: "/etc/kat/known_hosts", KeyringFile: "/etc/kat/trusted.asc"},
		},
		{
			name: "file and ssh URLs",
			yaml: "  gitops:\n    repository: file:///srv/git/cluster.git\n",
			want: GitOpsConfig{Repository: "file:///srv/git/cluster.git", Branch: "main", Path: ".", PollIntervalSeconds: 30},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cc, err := ParseClusterConfiguration("cluster.kat", []byte(minimalCluster+tc.yaml))
			if err != nil {
				t.Fatal(err)
			}
			if cc.Spec.GitOps == nil || *cc.Spec.GitOps != tc.want {
				t.Errorf("gitops = %+v, want %+v", cc.Spec.GitOps, tc.want)
			}
		})
	}
}

func TestParseClusterConfigurationInvalid(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"cluster CIDR missing", strings.Replace(minimalCluster, "  clusterCIDR: 10.100.0.0/16\n", "", 1), "cluster.kat:5: spec.clusterCIDR: is required"},
		{"cluster CIDR invalid", strings.Replace(minimalCluster, "10.100.0.0/16", "10.100.0.0/33", 1), "cluster.kat:6: spec.clusterCIDR: \"10.100.0.0/33\" is not a CIDR"},
		{"cluster CIDR host bits", strings.Replace(minimalCluster, "10.100.0.0/16", "10.100.1.0/16", 1), "cluster.kat:6: spec.clusterCIDR: \"10.100.1.0/16\" has host bits set (did you mean 10.100.0.0/16?)"},
		{"cluster CIDR IPv6", strings.Replace(minimalCluster, "10.100.0.0/16", "fd00::/64", 1), "cluster.kat:6: spec.clusterCIDR: \"fd00::/64\" must be an IPv4 network"},
		{"CIDRs overlap", strings.Replace(minimalCluster, "10.200.0.0/16", "10.100.128.0/24", 1), "cluster.kat:7: spec.serviceCIDR: 10.100.128.0/24 overlaps clusterCIDR 10.100.0.0/16"},
		{"node subnet bits zero", minimalCluster + "  nodeSubnetBits: 0\n", "cluster.kat:8: spec.nodeSubnetBits: must be at least 1"},
		{"node subnet too small", minimalCluster + "  nodeSubnetBits: 15\n", "cluster.kat:8: spec.nodeSubnetBits: 15 bits on top of clusterCIDR 10.100.0.0/16 make node subnets smaller than /30; use at most 14"},
		{"cluster domain invalid", minimalCluster + "  clusterDomain: Kat_Local\n", "cluster.kat:8: spec.clusterDomain"},
		{"cluster domain trailing dot", minimalCluster + "  clusterDomain: kat.local.\n", "must not end with a dot"},
		{"port zero", minimalCluster + "  agentPort: 0\n", "cluster.kat:8: spec.agentPort: must be between 1 and 65535, got 0"},
		{"port too large", minimalCluster + "  apiPort: 65536\n", "cluster.kat:8: spec.apiPort: must be between 1 and 65535"},
		{"ports collide", minimalCluster + "  etcdClientPort: 2380\n", "cluster.kat:8: spec.etcdClientPort: port 2380 is already used by etcdPeerPort"},
		{"volume path relative", minimalCluster + "  volumeBasePath: var/lib/kat\n", "cluster.kat:8: spec.volumeBasePath: \"var/lib/kat\" must be an absolute path"},
		{"log size no quantity", minimalCluster + "  containerLogMaxSize: 10MB\n", `cluster.kat:8: spec.containerLogMaxSize: invalid memory quantity "10MB"`},
		{"log size too small", minimalCluster + "  containerLogMaxSize: 4Ki\n", "cluster.kat:8: spec.containerLogMaxSize: must be at least 64Ki, got 4Ki"},
		{"backup path unclean", minimalCluster + "  backupPath: /var/lib/../kat\n", "cluster.kat:8: spec.backupPath"},
		{"etcd members even", minimalCluster + "  etcdMembers: 2\n", "cluster.kat:8: spec.etcdMembers: must be 1, 3 or 5 (an odd quorum size), got 2"},
		{"etcd members zero", minimalCluster + "  etcdMembers: 0\n", "cluster.kat:8: spec.etcdMembers: must be 1, 3 or 5 (an odd quorum size), got 0"},
		{"backup interval zero", minimalCluster + "  backupIntervalMinutes: 0\n", "cluster.kat:8: spec.backupIntervalMinutes: must be at least 1"},
		{"backup retention zero", minimalCluster + "  backupRetention: 0\n", "cluster.kat:8: spec.backupRetention: must be at least 1, got 0"},
		{"backup retention negative", minimalCluster + "  backupRetention: -2\n", "cluster.kat:8: spec.backupRetention: must be at least 1, got -2"},
		{"backup retention not a number", minimalCluster + "  backupRetention: five\n", "cluster.kat:8: spec.backupRetention"},
		{"tick zero", minimalCluster + "  agentTickSeconds: 0\n", "cluster.kat:8: spec.agentTickSeconds: must be at least 1"},
		{"node loss before tick", minimalCluster + "  nodeLossTimeoutSeconds: 10\n", "cluster.kat:8: spec.nodeLossTimeoutSeconds: must be more than agentTickSeconds (15), got 10"},
		{"collection before loss", minimalCluster + "  nodeCollectAfterSeconds: 60\n", "cluster.kat:8: spec.nodeCollectAfterSeconds: must be more than nodeLossTimeoutSeconds (60), or 0 (never), got 60"},
		{"name missing", strings.Replace(minimalCluster, "  name: homelab\n", "  labels: {a: b}\n", 1), "cluster.kat:3: metadata.name: is required"},
		{"namespace set", strings.Replace(minimalCluster, "  name: homelab\n", "  name: homelab\n  namespace: x\n", 1), "cluster.kat:5: metadata.namespace: must not be set"},
		{"unknown field", minimalCluster + "  podCIDR: 10.0.0.0/8\n", "cluster.kat:8: spec.podCIDR: unknown field \"podCIDR\""},
		{"wrong kind", strings.Replace(minimalCluster, "ClusterConfiguration", "Workload", 1), "cluster.kat:2: kind: must be \"ClusterConfiguration\", got \"Workload\""},
		{"wrong api version", strings.Replace(minimalCluster, "v1alpha1", "v1", 1), "cluster.kat:1: apiVersion: must be \"kat.dws.rip/v1alpha1\", got \"kat.dws.rip/v1\""},
		{"spec missing", "apiVersion: kat.dws.rip/v1alpha1\nkind: ClusterConfiguration\nmetadata:\n  name: c\n", "cluster.kat:1: spec: is required"},
		{"gitops repository missing", minimalCluster + "  gitops:\n    branch: main\n", "cluster.kat:8: spec.gitops.repository: is required"},
		{"gitops repository scheme", minimalCluster + "  gitops:\n    repository: git://example.com/x.git\n", "cluster.kat:9: spec.gitops.repository: scheme \"git\" is not supported"},
		{"gitops repository password", minimalCluster + "  gitops:\n    repository: https://me:s3cret@example.com/x.git\n", "spec.gitops.repository: must not contain a password"},
		{"gitops repository relative", minimalCluster + "  gitops:\n    repository: ../cluster\n", "spec.gitops.repository: \"../cluster\" is not a Git URL"},
		{"gitops path dotdot", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    path: ../other\n", "cluster.kat:10: spec.gitops.path: \"../other\" must not contain \"..\""},
		{"gitops ssh key without known hosts", minimalCluster + "  gitops:\n    repository: ssh://git@example.com/x.git\n    sshKeyFile: /etc/kat/id\n", "spec.gitops: sshKeyFile and knownHostsFile must be given together"},
		{"gitops keyring relative", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    keyringFile: keys.asc\n", "spec.gitops.keyringFile:"},
		{"gitops path absolute", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    path: /clusters\n", "spec.gitops.path: \"/clusters\" must be a relative path"},
		{"gitops poll too fast", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    pollIntervalSeconds: 4\n", "cluster.kat:10: spec.gitops.pollIntervalSeconds: must be at least 5, got 4"},
		{"gitops branch invalid", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    branch: \"a b\"\n", "spec.gitops.branch: \"a b\" is not a valid Git branch"},
		{"gitops secret relative", minimalCluster + "  gitops:\n    repository: https://example.com/x.git\n    webhookSecretFile: secret\n", "spec.gitops.webhookSecretFile: \"secret\" must be an absolute path"},
		{"two documents", minimalCluster + "---\n" + minimalCluster, "cluster.kat:9: file holds more than one YAML document"},
		{"empty", "", "cluster.kat: file is empty"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseClusterConfiguration("cluster.kat", []byte(tc.yaml))
			if err == nil {
				t.Fatal("accepted")
			}
			var list ErrorList
			if !errors.As(err, &list) {
				t.Fatalf("error %v is not an ErrorList", err)
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error does not contain %q:\n%v", tc.want, err)
			}
		})
	}
}

func TestParseNamespace(t *testing.T) {
	t.Parallel()
	valid := "apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata:\n  name: shop\n  labels:\n    team: web\n    legacy: no\n"
	ns, err := ParseNamespace(NamespaceFile, []byte(valid))
	if err != nil {
		t.Fatal(err)
	}
	if ns.Metadata.Name != "shop" || ns.Metadata.Labels["legacy"] != "no" || ns.Kind != KindNamespace {
		t.Errorf("namespace = %+v", ns)
	}
	tests := []struct {
		name string
		yaml string
		want string
	}{
		{"name invalid", strings.Replace(valid, "name: shop", "name: Shop", 1), "namespace.kat:4: metadata.name: \"Shop\" is not a valid name"},
		{"name missing", "apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\nmetadata: {}\n", "namespace.kat:3: metadata.name: is required"},
		{"metadata missing", "apiVersion: kat.dws.rip/v1alpha1\nkind: Namespace\n", "namespace.kat:1: metadata: is required"},
		{"namespace set", strings.Replace(valid, "  name: shop\n", "  name: shop\n  namespace: default\n", 1), "namespace.kat:5: metadata.namespace: must not be set for a Namespace"},
		{"spec not allowed", valid + "spec: {}\n", "namespace.kat:8: spec: unknown field \"spec\""},
		{"wrong kind", strings.Replace(valid, "kind: Namespace", "kind: Workload", 1), "namespace.kat:2: kind: must be \"Namespace\", got \"Workload\""},
		{"kind missing", strings.Replace(valid, "kind: Namespace\n", "", 1), "namespace.kat:1: kind: is required"},
		{"not yaml", "metadata: [\n", "namespace.kat:2: invalid YAML"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseNamespace(NamespaceFile, []byte(tc.yaml))
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseClusterConfigurationBackups(t *testing.T) {
	t.Parallel()
	yaml := minimalCluster + "  backupPath: /srv/kat-backups\n  backupIntervalMinutes: 60\n  backupRetention: 12\n"
	cc, err := ParseClusterConfiguration("cluster.kat", []byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	s := cc.Spec
	if s.BackupPath != "/srv/kat-backups" || s.BackupIntervalMinutes != 60 || s.BackupRetention != 12 {
		t.Errorf("backups = %q every %d min keeping %d", s.BackupPath, s.BackupIntervalMinutes, s.BackupRetention)
	}
}

// TestNodeCollectAfterZeroIsNever: an explicit 0 is kept (never collect),
// not replaced by the default.
func TestNodeCollectAfterZeroIsNever(t *testing.T) {
	t.Parallel()
	cc, err := ParseClusterConfiguration("cluster.kat", []byte(minimalCluster+"  nodeCollectAfterSeconds: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cc.Spec.NodeCollectAfterSeconds != 0 {
		t.Errorf("nodeCollectAfterSeconds = %d, want 0 as written", cc.Spec.NodeCollectAfterSeconds)
	}
}
