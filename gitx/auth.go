package gitx

import (
	"bufio"
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"kat.dws.rip/kat/api"
)

// ErrInvalid matches the errors that bad input causes, which retrying with
// the same input cannot help: credential fields that exclude each other or
// do not fit the URL, a credential file that is missing, empty or malformed,
// an unusable key, a host known_hosts does not list, a malformed ref. It does
// not appear in the messages, which name the parameter instead.
var ErrInvalid = errors.New("gitx: invalid input")

// Default user names.
const (
	// DefaultTokenUser is the HTTP user sent with api.GitAuth.TokenFile when
	// GitAuth.Username is empty, as GitHub expects for tokens (GitLab and
	// Gitea accept any user).
	DefaultTokenUser = "x-access-token"
	// DefaultSSHUser is the SSH user when neither api.GitAuth.Username nor the
	// URL names one.
	DefaultSSHUser = "git"
)

func init() {
	// go-git reads ~/.ssh/config to map an SSH host to another host name
	// and port. KAT's daemons take nothing from ~/.ssh: the URL alone says
	// where to connect, and known_hosts is checked for that host.
	gitssh.DefaultSSHConfig = nil
}

// invalidError is an error that matches ErrInvalid without saying so in its
// message; err, when set, is its cause (a *fs.PathError, ...).
type invalidError struct {
	msg string
	err error
}

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Unwrap() error        { return e.err }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

// invalid returns an ErrInvalid with the message format and args make;
// a %w among them becomes the cause.
func invalid(format string, args ...any) error {
	err := fmt.Errorf(format, args...)
	return &invalidError{msg: err.Error(), err: errors.Unwrap(err)}
}

// IsSSH reports whether rawURL is reached over SSH: an ssh:// URL or the
// scp-like form user@host:path.
func IsSSH(rawURL string) bool {
	ep, err := transport.NewEndpoint(rawURL)
	return err == nil && ep.Protocol == "ssh"
}

// CheckAuth checks the combination of a's fields, and that they fit rawURL
// (skipped when rawURL is ""), without reading any file. The error lists
// every problem, each naming its field (auth.sshKeyFile, ...), and matches
// ErrInvalid.
func CheckAuth(rawURL string, a api.GitAuth) error {
	var problems []string
	kinds := 0
	for _, f := range []string{a.TokenFile, a.BasicAuthFile, a.SSHKeyFile} {
		if f != "" {
			kinds++
		}
	}
	if kinds > 1 {
		problems = append(problems, "auth.tokenFile, auth.basicAuthFile and auth.sshKeyFile exclude each other: give at most one")
	}
	switch {
	case a.SSHKeyFile != "" && a.KnownHostsFile == "":
		problems = append(problems, "auth.knownHostsFile: required with auth.sshKeyFile (host keys are never taken from ~/.ssh)")
	case a.SSHKeyFile == "" && a.KnownHostsFile != "":
		problems = append(problems, "auth.knownHostsFile: only with auth.sshKeyFile")
	}
	if rawURL != "" {
		ssh := IsSSH(rawURL)
		switch {
		case ssh && a.SSHKeyFile == "":
			problems = append(problems, fmt.Sprintf("auth.sshKeyFile: required for the ssh URL %s (with auth.knownHostsFile)", RedactURL(rawURL)))
		case !ssh && a.SSHKeyFile != "":
			problems = append(problems, fmt.Sprintf("auth.sshKeyFile: only for ssh:// and scp-like URLs, not %s", RedactURL(rawURL)))
		}
		if ssh && (a.TokenFile != "" || a.BasicAuthFile != "") {
			problems = append(problems, fmt.Sprintf("auth.tokenFile and auth.basicAuthFile: only for http(s) URLs, not the ssh URL %s", RedactURL(rawURL)))
		}
	}
	if len(problems) == 0 {
		return nil
	}
	return invalid("%s", strings.Join(problems, "; "))
}

// AuthMethod reads a's files into a go-git auth method for rawURL; nil
// means anonymous (no field set, on a URL that is not ssh). The files are
// read at every call, so a rotated secret is picked up; their content never
// reaches an error. For SSH, the method accepts only a host key known_hosts
// lists for the URL's host and port, and offers the key types it holds.
// Errors name the parameter; see ErrInvalid for which match it.
func AuthMethod(rawURL string, a api.GitAuth) (transport.AuthMethod, error) {
	if err := CheckAuth(rawURL, a); err != nil {
		return nil, err
	}
	switch {
	case a.TokenFile != "":
		tok, err := firstLine("auth.tokenFile", a.TokenFile)
		if err != nil {
			return nil, err
		}
		return &githttp.BasicAuth{Username: cmp.Or(a.Username, DefaultTokenUser), Password: tok}, nil
	case a.BasicAuthFile != "":
		line, err := firstLine("auth.basicAuthFile", a.BasicAuthFile)
		if err != nil {
			return nil, err
		}
		user, pw, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, invalid("auth.basicAuthFile %s: want \"user:password\" on its first line", a.BasicAuthFile)
		}
		return &githttp.BasicAuth{Username: user, Password: pw}, nil
	case a.SSHKeyFile != "":
		return sshMethod(rawURL, a)
	}
	return nil, nil
}

// sshMethod reads the key and known_hosts of a for rawURL.
func sshMethod(rawURL string, a api.GitAuth) (transport.AuthMethod, error) {
	ep, err := transport.NewEndpoint(rawURL)
	if err != nil {
		return nil, invalid("url %s: %w", RedactURL(rawURL), err)
	}
	pem, err := readFile("auth.sshKeyFile", a.SSHKeyFile)
	if err != nil {
		return nil, err
	}
	keys, err := gitssh.NewPublicKeys(cmp.Or(a.Username, ep.User, DefaultSSHUser), pem, "")
	if err != nil {
		return nil, invalid("auth.sshKeyFile %s: not a usable unencrypted private key", a.SSHKeyFile)
	}
	// Read known_hosts first: go-git's own error for a missing file
	// suggests an environment variable KAT does not read.
	if _, err := readFile("auth.knownHostsFile", a.KnownHostsFile); err != nil {
		return nil, err
	}
	db, err := gitssh.NewKnownHostsDb(a.KnownHostsFile)
	if err != nil {
		return nil, invalid("auth.knownHostsFile %s: %w", a.KnownHostsFile, err)
	}
	port := ep.Port
	if port <= 0 {
		port = gitssh.DefaultPort
	}
	hostPort := net.JoinHostPort(ep.Host, strconv.Itoa(port))
	algos := db.HostKeyAlgorithms(hostPort)
	if len(algos) == 0 {
		return nil, invalid("auth.knownHostsFile %s: lists no host key of %s", a.KnownHostsFile, hostPort)
	}
	keys.HostKeyCallback = db.HostKeyCallback()
	keys.HostKeyAlgorithms = algos
	return keys, nil
}

// readFile reads the file a parameter names; a file that is missing or
// unreadable for its permissions is an ErrInvalid.
func readFile(field, file string) ([]byte, error) {
	b, err := os.ReadFile(file)
	switch {
	case errors.Is(err, fs.ErrNotExist), errors.Is(err, fs.ErrPermission):
		return nil, invalid("read %s: %w", field, err)
	case err != nil:
		return nil, fmt.Errorf("read %s: %w", field, err)
	}
	return b, nil
}

// firstLine is the first line of the file a parameter names, trimmed.
func firstLine(field, file string) (string, error) {
	b, err := readFile(field, file)
	if err != nil {
		return "", err
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) == "" {
		return "", invalid("%s %s: is empty", field, file)
	}
	return strings.TrimSpace(sc.Text()), nil
}
