// Package testenv is what KAT's tests need from the machine they run on,
// imported only by _test.go files (and the test support packages): the rule
// for a missing prerequisite, a real container registry, and a real HAProxy
// on loopback for the ingress proxy's tests.
//
// A test whose prerequisite (Podman, git, docker-registry) is missing is
// skipped, or failed when KAT_REQUIRE_PREREQS is set, as task ci sets it
// after installing them: a CI machine that lost a prerequisite goes red
// instead of silently skipping.
//
//	reg := testenv.StartRegistry(t, testenv.RegistryOptions{Auth: true})
//	// podman push --tls-verify=false --authfile reg.AuthFile IMAGE reg.Host/name:tag
package testenv

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"kat.dws.rip/kat/internal/poll/polltest"
)

// RequirePrereqsEnv is the environment variable that turns a missing
// prerequisite from a skip into a failure.
const RequirePrereqsEnv = "KAT_REQUIRE_PREREQS"

// SkipOrFail skips tb for a missing prerequisite, or fails it when
// RequirePrereqsEnv is set.
func SkipOrFail(tb testing.TB, format string, args ...any) {
	tb.Helper()
	if os.Getenv(RequirePrereqsEnv) != "" {
		tb.Fatalf("prerequisite missing (%s is set): "+format, append([]any{RequirePrereqsEnv}, args...)...)
	}
	tb.Skipf(format, args...)
}

// Registry is a docker-registry process on loopback, stopped when the test
// ends.
type Registry struct {
	// Host is its address, 127.0.0.1:PORT (plain HTTP).
	Host string
	// AuthFile is a Podman auth file holding its credentials, with
	// RegistryOptions.Auth; empty otherwise.
	AuthFile string
}

// RegistryOptions configure StartRegistry.
type RegistryOptions struct {
	// Auth makes the registry require the user "kat" (password
	// "cache-pw", htpasswd), whose credentials Registry.AuthFile holds.
	Auth bool
}

// StartRegistry runs Debian's docker-registry with filesystem storage in a
// temporary directory, on a free loopback port, and waits until it
// answers. It skips (or fails, see SkipOrFail) when docker-registry is not
// installed.
func StartRegistry(tb testing.TB, opts RegistryOptions) *Registry {
	tb.Helper()
	bin, err := exec.LookPath("docker-registry")
	if err != nil {
		SkipOrFail(tb, "docker-registry is not installed (Debian package docker-registry; scripts/install-prereqs.sh)")
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	reg := &Registry{Host: l.Addr().String()}
	_ = l.Close()
	dir := tb.TempDir()
	conf := fmt.Sprintf("version: 0.1\nlog:\n  level: error\nstorage:\n  filesystem:\n    rootdirectory: %s\n  delete:\n    enabled: true\nhttp:\n  addr: %s\n",
		filepath.Join(dir, "data"), reg.Host)
	if opts.Auth {
		hash, err := bcrypt.GenerateFromPassword([]byte("cache-pw"), bcrypt.MinCost)
		if err != nil {
			tb.Fatal(err)
		}
		htpasswd := filepath.Join(dir, "htpasswd")
		writeFile(tb, htpasswd, "kat:"+string(hash)+"\n")
		conf += fmt.Sprintf("auth:\n  htpasswd:\n    realm: kat\n    path: %s\n", htpasswd)
		reg.AuthFile = filepath.Join(dir, "auth.json")
		writeFile(tb, reg.AuthFile, fmt.Sprintf(`{"auths": {%q: {"auth": %q}}}`, reg.Host, base64.StdEncoding.EncodeToString([]byte("kat:cache-pw"))))
	}
	confPath := filepath.Join(dir, "config.yml")
	writeFile(tb, confPath, conf)

	var out bytes.Buffer
	cmd := exec.Command(bin, "serve", confPath)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		tb.Fatalf("start docker-registry: %v", err)
	}
	exited := make(chan struct{})
	var exitErr error // set before exited is closed
	go func() {
		exitErr = cmd.Wait()
		close(exited)
	}()
	tb.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-exited
	})
	polltest.UntilErr(tb, 20*time.Second, "docker-registry on "+reg.Host+" answers", func() error {
		select {
		case <-exited:
			return fmt.Errorf("docker-registry exited: %w\n%s", exitErr, out.String())
		default:
		}
		resp, err := http.Get("http://" + reg.Host + "/v2/")
		if err != nil {
			return err
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK || (opts.Auth && resp.StatusCode == http.StatusUnauthorized) {
			return nil
		}
		return fmt.Errorf("GET /v2/: %s", resp.Status)
	})
	return reg
}

func writeFile(tb testing.TB, path, content string) {
	tb.Helper()
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		tb.Fatal(err)
	}
}
