package webhook

import (
	"net/http"
	"testing"

	"kat.dws.rip/kat/internal/metrics/metricstest"
)

// TestMetricsCountReceivedAcceptedRefused: every request counts as
// received, and as accepted (by outcome) or refused (by reason). Not
// parallel: no other test of the package sends requests meanwhile, so the
// counts move by exactly these requests.
func TestMetricsCountReceivedAcceptedRefused(t *testing.T) {
	srv := newServer(t, HandlerConfig{}, &fakeSources{urls: allSources})
	push, ping := fixture(t, "github-push.json"), fixture(t, "github-ping.json")
	series := []struct {
		family string
		labels map[string]string
		want   float64
	}{
		{"kat_webhooks_received_total", map[string]string{"provider": ProviderGitHub}, 4},
		{"kat_webhooks_accepted_total", map[string]string{"provider": ProviderGitHub, "outcome": string(OutcomeAccepted)}, 1},
		{"kat_webhooks_accepted_total", map[string]string{"provider": ProviderGitHub, "outcome": string(OutcomePing)}, 1},
		{"kat_webhooks_refused_total", map[string]string{"provider": ProviderGitHub, "reason": string(OutcomeBadSignature)}, 1},
		{"kat_webhooks_refused_total", map[string]string{"provider": ProviderGitHub, "reason": string(OutcomeMissingSignature)}, 1},
		{"kat_webhooks_refused_total", map[string]string{"provider": ProviderGitHub}, 2},
	}
	before := make([]float64, len(series))
	for i, s := range series {
		before[i] = metricstest.Value(t, s.family, s.labels)
	}
	for _, req := range []struct {
		header http.Header
		body   []byte
		status int
	}{
		{signed(ProviderGitHub, "push", []byte(testSecret), push), push, http.StatusAccepted},
		{signed(ProviderGitHub, "ping", []byte(testSecret), ping), ping, http.StatusOK},
		{signed(ProviderGitHub, "push", []byte("wrong"), push), push, http.StatusUnauthorized},
		{http.Header{"X-Github-Event": {"push"}}, push, http.StatusUnauthorized},
	} {
		if got := post(t, http.MethodPost, srv.url+ProviderGitHub, req.header, req.body); got.status != req.status {
			t.Fatalf("answered %d %v, want %d", got.status, got.body, req.status)
		}
	}
	for i, s := range series {
		if got := metricstest.Value(t, s.family, s.labels) - before[i]; got != s.want {
			t.Errorf("%s%v moved by %v, want %v", s.family, s.labels, got, s.want)
		}
	}
}
