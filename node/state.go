package node

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"

	"github.com/google/uuid"
	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/store/resources"
)

// nodeState is this node's local record of how it was initialised: a cache of
// what etcd also holds, needed before etcd runs (which ports, which name).
type nodeState struct {
	NodeName         string                       `json:"nodeName"`
	NodeUID          string                       `json:"nodeUID"`
	ClusterUID       string                       `json:"clusterUID"`
	AdvertiseAddress string                       `json:"advertiseAddress"`
	EtcdEndpoints    []string                     `json:"etcdEndpoints,omitempty"`
	Cluster          quadlet.ClusterConfiguration `json:"cluster"`
	// Role is "" for a node that created the cluster (init), roleWorker
	// for one that joined it and roleMember for one that joined its etcd
	// quorum (join --etcd-peer).
	Role string `json:"role,omitempty"`
	// InitialCluster is the etcd initial cluster a member that joined
	// starts its etcd with the first time (later starts read the
	// membership from DATA_DIR/etcd).
	InitialCluster string `json:"initialCluster,omitempty"`
	// MemberID is a joined member's etcd member ID (hex), and
	// MemberClientURLs the other members' etcd client URLs when it
	// joined: until Promoted, the member asks them to promote it.
	MemberID         string   `json:"memberID,omitempty"`
	MemberClientURLs []string `json:"memberClientURLs,omitempty"`
	Promoted         bool     `json:"promoted,omitempty"`
	// Joined says a worker's join was admitted (its certificate is in
	// pki/); until then a restart asks the leader again.
	Joined bool `json:"joined,omitempty"`
	// Labels are the node's labels (--node-label), registered as it
	// joins or, on the leader, at every start.
	Labels map[string]string `json:"labels,omitempty"`
	// ParentClusterName is the cluster's name the node was told to join
	// (--parent-cluster-name): a worker that has one may detach.
	ParentClusterName string `json:"parentClusterName,omitempty"`
	// DetachedPorts are the ports of the node's own control plane while
	// it is detached (--detached-*-port); zero: the cluster's.
	DetachedPorts DetachedPorts `json:"detachedPorts,omitzero"`
	// Overlay is the WireGuard device's configuration (--wg-*); a node
	// initialised before the overlay existed has none and runs with the
	// defaults.
	Overlay *OverlayOptions `json:"overlay,omitempty"`
	// ResetTokens is set by kat-agent restore without --from-data-dir: the
	// next start makes this directory's new admin and join tokens the
	// cluster's (the snapshot holds only the old ones' hashes), then
	// clears it.
	ResetTokens bool `json:"resetTokens,omitempty"`
	// LeftQuorum is set once the member departed and left the etcd
	// quorum (kat-agent depart): its etcd data is stale, so the directory
	// cannot start again.
	LeftQuorum bool `json:"leftQuorum,omitempty"`
}

// overlay is the node's overlay configuration with the defaults filled in.
func (st *nodeState) overlay() OverlayOptions {
	o := OverlayOptions{Interface: netstack.DefaultInterface, Port: netstack.DefaultPort, Mode: string(netstack.ModeAuto)}
	if s := st.Overlay; s != nil {
		if s.Interface != "" {
			o.Interface = s.Interface
		}
		if s.Port != 0 {
			o.Port = s.Port
		}
		if s.Mode != "" {
			o.Mode = s.Mode
		}
	}
	return o
}

// dataDir names the files kept in the data directory.
type dataDir string

func (d dataDir) path(parts ...string) string {
	return filepath.Join(append([]string{string(d)}, parts...)...)
}
func (d dataDir) stateFile() string     { return d.path("node.json") }
func (d dataDir) adminToken() string    { return d.path("admin.token") }
func (d dataDir) joinToken() string     { return d.path("join.token") }
func (d dataDir) katcallConfig() string { return d.path("katcall.yaml") }
func (d dataDir) etcdDir() string       { return d.path("etcd") }
func (d dataDir) pkiDir() string        { return d.path("pki") }
func (d dataDir) logsDir() string       { return d.path("logs") }
func (d dataDir) wgKey() string         { return d.path(netstack.KeyFileName) }

// loadNodeState returns the saved state, or nil when the directory was never
// initialised.
func loadNodeState(d dataDir) (*nodeState, error) {
	b, err := os.ReadFile(d.stateFile())
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("read node state: %w", err)
	}
	var st nodeState
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, fmt.Errorf("read node state %s: %w", d.stateFile(), err)
	}
	return &st, nil
}

func saveNodeState(d dataDir, st *nodeState) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return fmt.Errorf("encode node state: %w", err)
	}
	return pki.WriteFileAtomic(d.stateFile(), b, 0o600)
}

// newNodeState builds the state of a first init from cluster.kat and flags.
func newNodeState(o *Options) (*nodeState, error) {
	if o.ConfigPath == "" {
		return nil, errors.New("--config: required for the first init of a data directory (path of cluster.kat)")
	}
	b, err := os.ReadFile(o.ConfigPath)
	if err != nil {
		return nil, fmt.Errorf("--config: %w", err)
	}
	cfg, err := quadlet.ParseClusterConfiguration(filepath.Base(o.ConfigPath), b)
	if err != nil {
		return nil, fmt.Errorf("invalid cluster configuration:\n%w", err)
	}
	st := &nodeState{NodeName: defaultNodeName(), NodeUID: uuid.NewString(), ClusterUID: uuid.NewString(),
		AdvertiseAddress: defaultAdvertiseAddress(), Cluster: *cfg}
	return st, nil
}

// applyOptions lets options override the node's name, address and ports,
// on the first init and on every resume.
func (st *nodeState) applyOptions(o *Options) {
	if o.NodeName != "" {
		st.NodeName = o.NodeName
	}
	if o.AdvertiseAddress != "" {
		st.AdvertiseAddress = o.AdvertiseAddress
	}
	if len(o.NodeLabels) > 0 {
		st.Labels = maps.Clone(o.NodeLabels)
	}
	if o.NodeType != "" {
		if st.Labels == nil {
			st.Labels = map[string]string{}
		}
		st.Labels[resources.NodeTypeLabel] = o.NodeType
	}
	if o.ParentClusterName != "" {
		st.ParentClusterName = o.ParentClusterName
	}
	for _, p := range []struct{ v, dst *int }{
		{&o.Detached.APIPort, &st.DetachedPorts.APIPort}, {&o.Detached.EtcdClientPort, &st.DetachedPorts.EtcdClientPort},
		{&o.Detached.EtcdPeerPort, &st.DetachedPorts.EtcdPeerPort},
	} {
		if *p.v != 0 {
			*p.dst = *p.v
		}
	}
	spec := &st.Cluster.Spec
	for _, p := range []struct {
		v   int
		dst *int
	}{
		{o.APIPort, &spec.APIPort}, {o.AgentPort, &spec.AgentPort},
		{o.EtcdClientPort, &spec.EtcdClientPort}, {o.EtcdPeerPort, &spec.EtcdPeerPort},
	} {
		if p.v != 0 {
			*p.dst = p.v
		}
	}
	if len(o.EtcdEndpoints) > 0 {
		st.EtcdEndpoints = o.EtcdEndpoints
	}
	ov := st.overlay()
	if o.Overlay.Interface != "" {
		ov.Interface = o.Overlay.Interface
	}
	if o.Overlay.Port != 0 {
		ov.Port = o.Overlay.Port
	}
	if o.Overlay.Mode != "" {
		ov.Mode = o.Overlay.Mode
	}
	st.Overlay = &ov
}

// ensureToken returns the token stored at path, creating a random one if the
// file does not exist.
func ensureToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err == nil {
		tok := strings.TrimSpace(string(b))
		if tok == "" {
			return "", fmt.Errorf("token file %s is empty", path)
		}
		return tok, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", fmt.Errorf("read token: %w", err)
	}
	tok, err := newSecret()
	if err != nil {
		return "", err
	}
	if err := pki.WriteFileAtomic(path, []byte(tok+"\n"), 0o600); err != nil {
		return "", err
	}
	return tok, nil
}

// newSecret returns 32 random bytes in hex: a new admin token or join
// secret.
func newSecret() (string, error) {
	raw := make([]byte, 32)
	if _, err := rand.Read(raw); err != nil {
		return "", fmt.Errorf("generate token: %w", err)
	}
	return hex.EncodeToString(raw), nil
}

// katcallConfig is the file katcall reads (DIR/katcall.yaml).
type katcallConfig struct {
	Server string `yaml:"server"`
	// Servers are the other members' API URLs, which katcall tries when
	// Server does not answer.
	Servers                  []string `yaml:"servers,omitempty"`
	Token                    string   `yaml:"token"`
	CertificateAuthorityData string   `yaml:"certificateAuthorityData"`
}

func writeKatcallConfig(path string, c katcallConfig) error {
	b, err := yaml.Marshal(c)
	if err != nil {
		return fmt.Errorf("encode katcall config: %w", err)
	}
	head := "# Written by kat-agent init. Use it with: katcall --config " + path +
		"\n# or copy it to ~/.kat/config. It holds the admin token: keep it private.\n"
	return pki.WriteFileAtomic(path, append([]byte(head), b...), 0o600)
}

// roleWorker marks the state of a node that joined a cluster: it runs an
// agent, not an etcd member nor a leader candidate.
const roleWorker = "worker"

// roleMember marks the state of a node that joined a cluster's etcd
// quorum (join --etcd-peer): it runs an etcd member, campaigns for the
// leadership and serves the API (forwarding to the leader while it does
// not lead).
const roleMember = "member"
