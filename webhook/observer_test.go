package webhook

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"testing"
)

// TestPushObserver: a request whose context carries an observer reports
// the push it carried once the signature is verified, and nothing when it
// is not.
func TestPushObserver(t *testing.T) {
	t.Parallel()
	h, err := NewHandler(HandlerConfig{Secret: StaticSecret([]byte(testSecret)), Dispatcher: &fakeSources{urls: allSources}})
	if err != nil {
		t.Fatal(err)
	}
	body := []byte(`{"repository": "https://git.example.com/ops/config.git", "ref": "refs/heads/main"}`)
	for _, tc := range []struct {
		name   string
		secret string
		status int
		want   []Push
	}{
		{name: "verified", secret: testSecret, status: http.StatusAccepted,
			want: []Push{{Provider: ProviderGeneric, RepoURLs: []string{"https://git.example.com/ops/config.git"}, Ref: "refs/heads/main"}}},
		{name: "wrong signature", secret: "not-it", status: http.StatusUnauthorized},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var seen []Push
			req := httptest.NewRequest(http.MethodPost, "/v1alpha1/webhooks/generic", bytes.NewReader(body))
			req = req.WithContext(WithPushObserver(req.Context(), func(p Push) { seen = append(seen, p) }))
			req.Header = signed(ProviderGeneric, "", []byte(tc.secret), body)
			rec := httptest.NewRecorder()
			h.ServeHTTP(rec, req)
			if rec.Code != tc.status {
				t.Fatalf("status %d, want %d: %s", rec.Code, tc.status, rec.Body)
			}
			if len(seen) != len(tc.want) || (len(seen) == 1 && (seen[0].Ref != tc.want[0].Ref || seen[0].RepoURLs[0] != tc.want[0].RepoURLs[0])) {
				t.Fatalf("observed %+v, want %+v", seen, tc.want)
			}
		})
	}
}
