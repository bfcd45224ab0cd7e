// Package gitauth turns the credential files that KAT's Git clients name
// (a token file, a "user:password" file, or an SSH key with its known_hosts)
// into a go-git auth method, and removes credentials from URLs and error
// messages. It is the one implementation behind both Git clients: build
// (app repositories) and gitsync (config repositories), which is why it sits
// in the build layer, below gitsync.
//
// The files are read at every call, so a rotated secret is picked up, and
// their content never reaches an error. Errors name the parameter
// (auth.tokenFile, auth.sshKeyFile, ...); those caused by the files' content
// or by the combination of fields match ErrInvalid, so that a caller can
// classify them (build wraps them in build.ErrInvalid), while read errors do
// not.
package gitauth

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"net/url"
	"os"
	"strings"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
)

// ErrInvalid matches the errors of Method that retrying cannot help: fields
// that exclude each other, an empty or malformed file, an unusable key. It
// does not appear in the error messages.
var ErrInvalid = errors.New("gitauth: invalid credentials")

// Files names the credential files of a repository. At most one of
// TokenFile, BasicAuthFile and SSHKeyFile is set. build.Auth and
// resources.SourceAuth have the same fields and convert to Files.
type Files struct {
	// TokenFile holds a token (first line) sent as the HTTP basic
	// password with Username (default "x-access-token") as the user.
	TokenFile string
	// Username is the HTTP user sent with TokenFile, or the SSH user
	// (default "git").
	Username string
	// BasicAuthFile holds "user:password" on its first line.
	BasicAuthFile string
	// SSHKeyFile is an unencrypted PEM private key for ssh:// and scp-like
	// URLs.
	SSHKeyFile string
	// KnownHostsFile is the known_hosts file SSH host keys are checked
	// against; required with SSHKeyFile.
	KnownHostsFile string
}

// invalidError is an error of Method that matches ErrInvalid without
// saying so in its message.
type invalidError struct{ msg string }

func (e *invalidError) Error() string        { return e.msg }
func (e *invalidError) Is(target error) bool { return target == ErrInvalid }

func invalid(format string, args ...any) error {
	return &invalidError{msg: fmt.Sprintf(format, args...)}
}

// Method reads the credential files of f into a go-git auth method; nil
// means anonymous.
func Method(f Files) (transport.AuthMethod, error) {
	n := 0
	for _, file := range []string{f.TokenFile, f.BasicAuthFile, f.SSHKeyFile} {
		if file != "" {
			n++
		}
	}
	if n > 1 {
		return nil, invalid("auth: tokenFile, basicAuthFile and sshKeyFile are exclusive")
	}
	switch {
	case f.TokenFile != "":
		tok, err := firstLine("auth.tokenFile", f.TokenFile)
		if err != nil {
			return nil, err
		}
		user := f.Username
		if user == "" {
			user = "x-access-token"
		}
		return &githttp.BasicAuth{Username: user, Password: tok}, nil
	case f.BasicAuthFile != "":
		line, err := firstLine("auth.basicAuthFile", f.BasicAuthFile)
		if err != nil {
			return nil, err
		}
		user, pw, ok := strings.Cut(line, ":")
		if !ok || user == "" {
			return nil, invalid("auth.basicAuthFile %s: want \"user:password\" on its first line", f.BasicAuthFile)
		}
		return &githttp.BasicAuth{Username: user, Password: pw}, nil
	case f.SSHKeyFile != "":
		if f.KnownHostsFile == "" {
			return nil, invalid("auth.knownHostsFile: is required with auth.sshKeyFile")
		}
		user := f.Username
		if user == "" {
			user = "git"
		}
		pem, err := os.ReadFile(f.SSHKeyFile)
		if err != nil {
			return nil, fmt.Errorf("read auth.sshKeyFile: %w", err)
		}
		keys, err := gitssh.NewPublicKeys(user, pem, "")
		if err != nil {
			return nil, invalid("auth.sshKeyFile %s: not a usable unencrypted private key", f.SSHKeyFile)
		}
		cb, err := gitssh.NewKnownHostsCallback(f.KnownHostsFile)
		if err != nil {
			return nil, fmt.Errorf("read auth.knownHostsFile %s: %w", f.KnownHostsFile, err)
		}
		keys.HostKeyCallback = cb
		return keys, nil
	}
	return nil, nil
}

// firstLine is the first line of file, trimmed; field names the parameter
// in errors.
func firstLine(field, file string) (string, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return "", fmt.Errorf("read %s: %w", field, err)
	}
	sc := bufio.NewScanner(bytes.NewReader(b))
	if !sc.Scan() || strings.TrimSpace(sc.Text()) == "" {
		return "", invalid("%s %s is empty", field, file)
	}
	return strings.TrimSpace(sc.Text()), nil
}

// RedactURL removes user information (a user name and password or token)
// from a URL, for errors and logs. Other strings, such as scp-like
// addresses, are returned unchanged.
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.User == nil {
		return raw
	}
	u.User = nil
	return u.String()
}

// Redactor replaces every credential-bearing form of one URL in messages:
// the URL itself by its redacted form, and its password, plain or
// path-escaped, by "***". The zero Redactor changes nothing.
type Redactor struct{ old []string }

// NewRedactor returns the Redactor for rawURL.
func NewRedactor(rawURL string) Redactor {
	u, err := url.Parse(rawURL)
	if err != nil || u.User == nil {
		return Redactor{}
	}
	r := Redactor{old: []string{rawURL, RedactURL(rawURL)}}
	if p, ok := u.User.Password(); ok && p != "" {
		r.old = append(r.old, p, "***")
		if e := url.PathEscape(p); e != p {
			r.old = append(r.old, e, "***")
		}
	}
	return r
}

// String returns s without the credentials.
func (r Redactor) String(s string) string {
	if len(r.old) == 0 {
		return s
	}
	return strings.NewReplacer(r.old...).Replace(s)
}

// redactedError keeps the chain of err (errors.Is still works) and hides
// credentials in its message.
type redactedError struct {
	msg string
	err error
}

func (e *redactedError) Error() string { return e.msg }
func (e *redactedError) Unwrap() error { return e.err }

// Error returns err with the credentials removed from its message; the
// chain of err is kept, so errors.Is and errors.As still work.
func (r Redactor) Error(err error) error {
	if err == nil || len(r.old) == 0 {
		return err
	}
	return &redactedError{msg: r.String(err.Error()), err: err}
}
