package apiserver_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiserver"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestErrorsSayWhatWasBeingDone: the server's errors and the agent API's
// answers say what was being done, and its sentinels are prefixed with the
// package's name, not "api:".
func TestErrorsSayWhatWasBeingDone(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"sentinel unknown build", apiserver.ErrUnknownBuild, "apiserver: unknown build"},
		{"sentinel unknown instance", apiserver.ErrUnknownInstance, "apiserver: unknown instance"},
		{"no repo", newErr(apiserver.Config{AdminTokenHash: "h"}), "configure the API server: Config.Repo is required"},
		{"no token hash", newErr(apiserver.Config{Repo: resources.New(storetest.New(t))}), "configure the API server: Config.AdminTokenHash is required"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.err == nil || tc.err.Error() != tc.want {
				t.Errorf("error %v, want %q", tc.err, tc.want)
			}
		})
	}

	failed := errors.New("podman logs: exit status 125")
	srv := httptest.NewServer(apiserver.AgentHandler(apiserver.AgentConfig{
		Logs: func(_ context.Context, id string, _ api.LogOptions, _ io.Writer) error {
			if id == "broken" {
				return failed
			}
			return fmt.Errorf("%w: %s", apiserver.ErrUnknownInstance, id)
		},
		BuildLog: func(_ context.Context, _, _, commit string, _ io.Writer) error {
			if commit == "broken" {
				return failed
			}
			return fmt.Errorf("%w: %s", apiserver.ErrUnknownBuild, commit)
		},
	}))
	t.Cleanup(srv.Close)
	for _, tc := range []struct {
		name, path string
		status     int
		message    string
	}{
		{"unknown instance", "/v1alpha1/instances/web-x/logs", http.StatusNotFound, "instance web-x does not run on this node"},
		{"failed log", "/v1alpha1/instances/broken/logs", http.StatusBadGateway, "read the log of instance broken: podman logs: exit status 125"},
		{"unknown build", "/v1alpha1/builds/default/web/abc/log", http.StatusNotFound, "this node has no log of the build of default/web at abc"},
		{"failed build log", "/v1alpha1/builds/default/web/broken/log", http.StatusBadGateway,
			"read the log of the build of default/web at broken: podman logs: exit status 125"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, err := srv.Client().Get(srv.URL + tc.path)
			if err != nil {
				t.Fatal(err)
			}
			defer resp.Body.Close()
			var e api.Error
			if err := json.NewDecoder(resp.Body).Decode(&e); err != nil {
				t.Fatalf("decode the answer: %v", err)
			}
			if resp.StatusCode != tc.status || e.Message != tc.message || strings.HasPrefix(e.Message, "api:") {
				t.Errorf("GET %s: %d %q, want %d %q", tc.path, resp.StatusCode, e.Message, tc.status, tc.message)
			}
		})
	}
}

func newErr(cfg apiserver.Config) error {
	_, err := apiserver.New(cfg)
	return err
}
