package main

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
)

// fileConfig is the katcall configuration file, as kat-agent init writes it.
type fileConfig struct {
	Server                   string `yaml:"server"`
	Token                    string `yaml:"token"`
	CertificateAuthorityData string `yaml:"certificateAuthorityData"`
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
func loadConfig(flag string) (*api.ClientConfig, string, error) {
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
	return &api.ClientConfig{Server: fc.Server, Token: fc.Token, CAData: []byte(fc.CertificateAuthorityData)}, path, nil
}

// client builds an API client from the configuration.
func (g *globals) client() (*api.Client, error) {
	cfg, path, err := loadConfig(g.configPath)
	if err != nil {
		return nil, err
	}
	c, err := api.NewClient(*cfg)
	if err != nil {
		return nil, fmt.Errorf("configuration %s: %w", path, err)
	}
	return c, nil
}
