package gitsync

import (
	"bufio"
	"bytes"
	"fmt"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"kat.dws.rip/kat/store/resources"
)

// authFor reads the credential files of a source, on every call so that a
// rotated secret is picked up. Errors name the file, never its content.
func authFor(a resources.SourceAuth) (transport.AuthMethod, error) {
	switch {
	case a.TokenFile != "":
		tok, err := firstLine(a.TokenFile)
		if err != nil {
			return nil, err
		}
		user := a.Username
		if user == "" {
			user = "x-access-token"
		}
		return &githttp.BasicAuth{Username: user, Password: tok}, nil
	case a.BasicAuthFile != "":
		line, err := firstLine(a.BasicAuthFile)
		if err != nil {
			return nil, err
		}
		user, pw, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, fmt.Errorf("auth.basicAuthFile %s: want \"user:password\" on its first line", a.BasicAuthFile)
		}
		return &githttp.BasicAuth{Username: user, Password: pw}, nil
	case a.SSHKeyFile != "":
		user := a.Username
		if user == "" {
			user = "git"
		}
		pem, err := os.ReadFile(a.SSHKeyFile)
		if err != nil {
			return nil, fmt.Errorf("auth.sshKeyFile: %w", err)
		}
		keys, err := gitssh.NewPublicKeys(user, pem, "")
		if err != nil {
			return nil, fmt.Errorf("auth.sshKeyFile %s: not a usable private key", a.SSHKeyFile)
		}
		cb, err := gitssh.NewKnownHostsCallback(a.KnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("auth.knownHostsFile %s: %w", a.KnownHostsFile, err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

func firstLine(file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read credentials: %w", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) == "" {
		return "", fmt.Errorf("credentials file %s is empty", file)
	}
	return strings.TrimSpace(sc.Text()), nil
}
