package node

import (
	"debug/elf"
	"fmt"
	"os"
	"path/filepath"

	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/gitsync"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/reconcile/agent"
)

// secretKeys are the keys secrets need on the leader: the cluster's age
// identity (derived from the CA key) and the CA to seal values with. Nil,
// with a warning, where the CA key is missing: secret files are then path
// errors.
func (n *Node) secretKeys() *gitsync.SecretKeys {
	id, err := n.ca.AgeIdentity()
	if err != nil {
		n.log.Warn().Err(err).Msg("secrets cannot be decrypted on this node")
		return nil
	}
	return &gitsync.SecretKeys{Identity: id, Sealer: n.ca, KeyID: pki.Fingerprint(n.ca.Cert)}
}

// apiSecretKeys are keys as the API server takes them; nil without.
func (n *Node) apiSecretKeys(keys *gitsync.SecretKeys) *apiserver.SecretKeys {
	if keys == nil {
		return nil
	}
	return &apiserver.SecretKeys{Identity: keys.Identity, KeyID: keys.KeyID, Sealer: keys.Sealer}
}

// secretsLayout is where the agent keeps its instances' secrets: a tmpfs
// at DATA_DIR/secrets, and this program, which containers with secret
// environment variables start through.
func (n *Node) secretsLayout() (agent.SecretsLayout, error) {
	exe, err := os.Executable()
	if err != nil {
		return agent.SecretsLayout{}, fmt.Errorf("find kat-agent, the wrapper of secret environment variables: %w", err)
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return agent.SecretsLayout{}, fmt.Errorf("find kat-agent, the wrapper of secret environment variables: %w", err)
	}
	layout := agent.SecretsLayout{Dir: n.hostFiles().path("secrets"), Agent: exe}
	if static, err := isStatic(exe); err != nil || !static {
		layout.Agent = ""
		layout.AgentProblem = "kat-agent is dynamically linked and cannot run inside containers: build it with CGO_ENABLED=0 (task build does)"
		if err != nil {
			layout.AgentProblem = fmt.Sprintf("read kat-agent (%s): %v", exe, err)
		}
		n.log.Warn().Str("kat_agent", exe).Msg(layout.AgentProblem)
	}
	return layout, nil
}

// isStatic reports whether the ELF program at path needs no dynamic
// loader (no PT_INTERP).
func isStatic(path string) (bool, error) {
	f, err := elf.Open(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			return false, nil
		}
	}
	return true, nil
}
