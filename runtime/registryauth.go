package runtime

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"strings"
)

// authFile is the part of a podman auth file (containers-auth.json) KAT
// reads: {"auths": {"host": {"auth": base64("user:password")}}}.
type authFile struct {
	Auths map[string]struct {
		Auth string `json:"auth"`
	} `json:"auths"`
}

// readAuthFile reads the user and password of every registry of a podman
// auth file.
func readAuthFile(path string) (map[string][2]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read registry auth file: %w", err)
	}
	var f authFile
	if err := json.Unmarshal(b, &f); err != nil {
		return nil, fmt.Errorf("read registry auth file %s: %w", path, err)
	}
	out := make(map[string][2]string, len(f.Auths))
	for host, a := range f.Auths {
		raw, err := base64.StdEncoding.DecodeString(a.Auth)
		if err != nil {
			return nil, fmt.Errorf("read registry auth file %s: auths.%s.auth: %w", path, host, err)
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		out[host] = [2]string{user, pass}
	}
	return out, nil
}

// RegistryCredentials returns the user and password of host in a podman
// auth file (containers-auth.json); ok is false when the file is not set,
// cannot be read or has none for host.
func RegistryCredentials(authFile, host string) (user, pass string, ok bool) {
	if authFile == "" {
		return "", "", false
	}
	creds, err := readAuthFile(authFile)
	if err != nil {
		return "", "", false
	}
	c, ok := creds[host]
	return c[0], c[1], ok
}

// registryAuthHeader is the X-Registry-Auth header that hands the service
// every credential of a podman auth file, as podman's own remote client
// sends it (base64url of {"host": {"username": ..., "password": ...}}); nil
// when authFile is "".
func registryAuthHeader(authFile string) (http.Header, error) {
	if authFile == "" {
		return nil, nil
	}
	creds, err := readAuthFile(authFile)
	if err != nil {
		return nil, err
	}
	type authConfig struct {
		Username string `json:"username,omitempty"`
		Password string `json:"password,omitempty"`
	}
	m := make(map[string]authConfig, len(creds))
	for host, c := range creds {
		m[host] = authConfig{Username: c[0], Password: c[1]}
	}
	b, err := json.Marshal(m)
	if err != nil {
		return nil, fmt.Errorf("encode registry credentials: %w", err)
	}
	return http.Header{"X-Registry-Auth": {base64.URLEncoding.EncodeToString(b)}}, nil
}
