package gitx

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"golang.org/x/crypto/ssh"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/gitx/gittest"
)

const (
	httpURL = "https://git.example.com/acme/app.git"
	sshURL  = "ssh://git.example.com/acme/app.git"
)

func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAuthMethod reads every kind of credential file and refuses bad input
// with an error that names the parameter, matches ErrInvalid and never holds
// a secret.
func TestAuthMethod(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string { return writeFile(t, dir, name, content) }
	token, basic := file("token", "tok123\n"), file("basic", "alice:pw:with:colons\n")
	noColon, empty, blank := file("nocolon", "tok123\n"), file("empty", ""), file("blank", "  \nsecond\n")
	missing := filepath.Join(dir, "missing")
	_, keyPEM := gittest.NewKey(t)
	key := file("id", string(keyPEM))
	hosts := file("known_hosts", "git.example.com "+authorizedKey(t)+"\n")
	otherHosts := file("other_hosts", "elsewhere.example.com "+authorizedKey(t)+"\n")
	badHosts := file("bad_hosts", "git.example.com not-a-key\n")

	type want struct {
		user, pw string // an HTTP basic method
		sshUser  string // an SSH method
	}
	tests := []struct {
		name string
		url  string
		auth api.GitAuth
		want want
		// err are substrings of the error; it must match ErrInvalid.
		err      []string
		notExist bool // the error also matches fs.ErrNotExist
	}{
		{name: "anonymous", url: httpURL},
		{name: "anonymous file URL", url: "file:///srv/app.git"},
		{name: "token", url: httpURL, auth: api.GitAuth{TokenFile: token}, want: want{user: DefaultTokenUser, pw: "tok123"}},
		{name: "token with user", url: httpURL, auth: api.GitAuth{TokenFile: token, Username: "oauth2"}, want: want{user: "oauth2", pw: "tok123"}},
		{name: "basic", url: httpURL, auth: api.GitAuth{BasicAuthFile: basic}, want: want{user: "alice", pw: "pw:with:colons"}},
		{name: "ssh key", url: sshURL, auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: hosts}, want: want{sshUser: DefaultSSHUser}},
		{name: "ssh user from the URL", url: "deploy@git.example.com:acme/app.git", auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: hosts}, want: want{sshUser: "deploy"}},
		{name: "ssh user from auth", url: "ssh://git@git.example.com/acme/app.git", auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: hosts, Username: "ci"}, want: want{sshUser: "ci"}},

		{name: "basic without colon", url: httpURL, auth: api.GitAuth{BasicAuthFile: noColon}, err: []string{"auth.basicAuthFile", `"user:password"`}},
		{name: "empty token", url: httpURL, auth: api.GitAuth{TokenFile: empty}, err: []string{"auth.tokenFile", "is empty"}},
		{name: "token on a blank first line", url: httpURL, auth: api.GitAuth{TokenFile: blank}, err: []string{"auth.tokenFile", "is empty"}},
		{name: "missing token file", url: httpURL, auth: api.GitAuth{TokenFile: missing}, err: []string{"read auth.tokenFile", missing}, notExist: true},
		{name: "missing basic file", url: httpURL, auth: api.GitAuth{BasicAuthFile: missing}, err: []string{"read auth.basicAuthFile"}, notExist: true},
		{name: "token and basic", url: httpURL, auth: api.GitAuth{TokenFile: token, BasicAuthFile: basic}, err: []string{"exclude each other"}},
		{name: "token and ssh key", url: sshURL, auth: api.GitAuth{TokenFile: token, SSHKeyFile: key, KnownHostsFile: hosts}, err: []string{"exclude each other", "only for http(s) URLs"}},
		{name: "ssh key without known_hosts", url: sshURL, auth: api.GitAuth{SSHKeyFile: key}, err: []string{"auth.knownHostsFile: required with auth.sshKeyFile"}},
		{name: "known_hosts without a key", url: httpURL, auth: api.GitAuth{KnownHostsFile: hosts}, err: []string{"auth.knownHostsFile: only with auth.sshKeyFile"}},
		{name: "ssh URL without a key", url: sshURL, err: []string{"auth.sshKeyFile: required for the ssh URL"}},
		{name: "scp-like URL without a key", url: "git@git.example.com:acme/app.git", err: []string{"auth.sshKeyFile: required"}},
		{name: "ssh key for an https URL", url: httpURL, auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: hosts}, err: []string{"auth.sshKeyFile: only for ssh"}},
		{name: "token for an ssh URL", url: sshURL, auth: api.GitAuth{TokenFile: token}, err: []string{"auth.tokenFile and auth.basicAuthFile: only for http(s)"}},
		{name: "unusable ssh key", url: sshURL, auth: api.GitAuth{SSHKeyFile: token, KnownHostsFile: hosts}, err: []string{"auth.sshKeyFile", "not a usable unencrypted private key"}},
		{name: "missing ssh key", url: sshURL, auth: api.GitAuth{SSHKeyFile: missing, KnownHostsFile: hosts}, err: []string{"read auth.sshKeyFile"}, notExist: true},
		{name: "missing known_hosts", url: sshURL, auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: missing}, err: []string{"read auth.knownHostsFile"}, notExist: true},
		{name: "malformed known_hosts", url: sshURL, auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: badHosts}, err: []string{"auth.knownHostsFile " + badHosts}},
		{name: "host not in known_hosts", url: sshURL, auth: api.GitAuth{SSHKeyFile: key, KnownHostsFile: otherHosts}, err: []string{"auth.knownHostsFile", "lists no host key of git.example.com:22"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			m, err := AuthMethod(tc.url, tc.auth)
			if len(tc.err) > 0 {
				if err == nil {
					t.Fatalf("AuthMethod = %v, want an error", m)
				}
				for _, s := range tc.err {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q does not contain %q", err, s)
					}
				}
				if !errors.Is(err, ErrInvalid) || errors.Is(err, fs.ErrNotExist) != tc.notExist {
					t.Errorf("error %q: ErrInvalid %t, fs.ErrNotExist %t; want true, %t", err,
						errors.Is(err, ErrInvalid), errors.Is(err, fs.ErrNotExist), tc.notExist)
				}
				if strings.Contains(err.Error(), "tok123") || strings.Contains(err.Error(), ErrInvalid.Error()) {
					t.Errorf("error %q holds the secret or the sentinel's text", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			switch m := m.(type) {
			case nil:
				if tc.want != (want{}) {
					t.Errorf("anonymous, want %+v", tc.want)
				}
			case *githttp.BasicAuth:
				if m.Username != tc.want.user || m.Password != tc.want.pw {
					t.Errorf("basic %s/%s, want %s/%s", m.Username, m.Password, tc.want.user, tc.want.pw)
				}
			case *gitssh.PublicKeys:
				if m.User != tc.want.sshUser || m.HostKeyCallback == nil || !slices.Contains(m.HostKeyAlgorithms, "ssh-ed25519") {
					t.Errorf("ssh user %q, host key algorithms %v; want user %q, a host key check with ssh-ed25519",
						m.User, m.HostKeyAlgorithms, tc.want.sshUser)
				}
			default:
				t.Errorf("method %T, want %+v", m, tc.want)
			}
		})
	}
}

// TestAuthMethodRereadsFiles picks up a rotated token.
func TestAuthMethodRereadsFiles(t *testing.T) {
	dir := t.TempDir()
	a := api.GitAuth{TokenFile: writeFile(t, dir, "token", "old\n")}
	for _, want := range []string{"old", "new"} {
		writeFile(t, dir, "token", want+"\n")
		m, err := AuthMethod(httpURL, a)
		if err != nil {
			t.Fatal(err)
		}
		if got := m.(*githttp.BasicAuth).Password; got != want {
			t.Errorf("token %q, want %q", got, want)
		}
	}
}

// TestCheckAuthListsEveryProblem: one call names every bad field.
func TestCheckAuthListsEveryProblem(t *testing.T) {
	err := CheckAuth(sshURL, api.GitAuth{TokenFile: "/t", BasicAuthFile: "/b", KnownHostsFile: "/k"})
	for _, s := range []string{"exclude each other", "auth.knownHostsFile: only with", "auth.sshKeyFile: required", "only for http(s)"} {
		if err == nil || !strings.Contains(err.Error(), s) {
			t.Errorf("CheckAuth: %v; want it to say %q", err, s)
		}
	}
	if !errors.Is(err, ErrInvalid) {
		t.Errorf("CheckAuth: %v does not match ErrInvalid", err)
	}
	if err := CheckAuth("", api.GitAuth{SSHKeyFile: "/k", KnownHostsFile: "/h"}); err != nil {
		t.Errorf("CheckAuth without a URL: %v", err)
	}
}

func TestIsSSH(t *testing.T) {
	for url, want := range map[string]bool{
		"ssh://git@host/r.git": true, "git@host:r.git": true, "host:r.git": true,
		"https://host/r.git": false, "http://u:p@host/r": false, "file:///srv/r.git": false, "/srv/r.git": false,
	} {
		if got := IsSSH(url); got != want {
			t.Errorf("IsSSH(%q) = %t, want %t", url, got, want)
		}
	}
}

// authorizedKey is a new public key in authorized_keys form ("type base64").
func authorizedKey(t *testing.T) string {
	t.Helper()
	pub, _ := gittest.NewKey(t)
	return strings.TrimSpace(string(ssh.MarshalAuthorizedKey(pub)))
}
