package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"time"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki"
)

// fileConfig is the katcall configuration file, as kat-agent init writes it.
type fileConfig struct {
	Server string `yaml:"server"`
	// Servers are the API URLs of the cluster's other members, tried when
	// Server cannot answer; katcall keeps them up to date.
	Servers                  []string `yaml:"servers,omitempty"`
	Token                    string   `yaml:"token"`
	CertificateAuthorityData string   `yaml:"certificateAuthorityData"`
}

// configPath picks the configuration file: the flag, then $KATCONFIG, then
// ~/.kat/config.
func configPath(flag string) (string, error) {
	if flag != "" {
		return flag, nil
	}
	if env := os.Getenv("KATCONFIG"); env != "" {
		return env, nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", errors.New("no configuration: pass --config or set KATCONFIG")
	}
	return filepath.Join(home, ".kat", "config"), nil
}

// loadConfig reads and checks the configuration file.
func loadConfig(flag string) (*apiclient.Config, string, error) {
	path, err := configPath(flag)
	if err != nil {
		return nil, "", err
	}
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, path, fmt.Errorf("no configuration at %s: pass --config, set KATCONFIG, or copy DATA_DIR/katcall.yaml written by kat-agent init to ~/.kat/config", path)
	}
	if err != nil {
		return nil, path, fmt.Errorf("read configuration %s: %w", path, err)
	}
	var fc fileConfig
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	if err := dec.Decode(&fc); err != nil {
		return nil, path, fmt.Errorf("configuration %s: %w", path, err)
	}
	switch {
	case fc.Server == "":
		return nil, path, fmt.Errorf("configuration %s: server: missing (the API URL, e.g. https://10.0.0.1:9115)", path)
	case fc.Token == "":
		return nil, path, fmt.Errorf("configuration %s: token: missing", path)
	}
	return &apiclient.Config{Server: fc.Server, Servers: fc.Servers, Token: fc.Token, CAData: []byte(fc.CertificateAuthorityData)}, path, nil
}

// client builds an API client from the configuration.
func (g *globals) client() (*apiclient.Client, error) {
	cfg, path, err := loadConfig(g.configPath)
	if err != nil {
		return nil, err
	}
	c, err := apiclient.New(*cfg)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", path, err)
	}
	g.used, g.usedConfig = c, path
	return c, nil
}

// refreshServers brings the configuration's list of servers up to date
// when the command's client had to fail over (a server it was given did not
// answer): server becomes the leader's URL and servers the other members'.
// The rest of the file, comments included, stays as it is.
func (g *globals) refreshServers(ctx context.Context) error {
	if g.used == nil || !g.used.FailedOver() {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	cs, err := g.used.ClusterServers(ctx)
	if err != nil {
		return fmt.Errorf("refresh the servers of %s: %w", g.usedConfig, err)
	}
	if len(cs.Servers) == 0 {
		return nil
	}
	if err := updateServers(g.usedConfig, cs.Servers[0], cs.Servers[1:]); err != nil {
		return fmt.Errorf("refresh the servers of %s: %w", g.usedConfig, err)
	}
	return nil
}

// updateServers rewrites the server and servers keys of the configuration
// file at path, keeping its other keys and comments, atomically.
func updateServers(path, server string, servers []string) error {
	b, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(b, &doc); err != nil {
		return err
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return errors.New("not a YAML mapping")
	}
	m := doc.Content[0]
	set := func(key string, value *yaml.Node) {
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == key {
				m.Content[i+1] = value
				return
			}
		}
		m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, value)
	}
	set("server", &yaml.Node{Kind: yaml.ScalarNode, Value: server})
	list := &yaml.Node{Kind: yaml.SequenceNode}
	for _, s := range servers {
		list.Content = append(list.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: s})
	}
	set("servers", list)
	out, err := yaml.Marshal(&doc)
	if err != nil {
		return err
	}
	info, err := os.Stat(path)
	if err != nil {
		return err
	}
	return pki.WriteFileAtomic(path, out, info.Mode().Perm())
}
