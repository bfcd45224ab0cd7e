// Package webhook receives push webhooks from Git hosts, verifies them and
// hands each verified push to a [Dispatcher] as a hint.
//
// A push webhook is never trusted for content: it only says "this repository
// moved". The dispatcher (gitsync) matches the payload's repository URLs and
// ref against its configured sources ([Push.Matches] compares every URL form
// of a repository through [RepoKey]) and fetches from the configured URL,
// never from the payload.
//
// # Use
//
//	h, err := webhook.NewHandler(webhook.HandlerConfig{
//		Secret:     webhook.SecretFile("/etc/kat/webhook.secret"),
//		Dispatcher: syncer,
//		Logger:     log,
//	})
//	r.Method(http.MethodPost, "/v1alpha1/webhooks/{provider}", h)
//
// The provider is read from the chi URL parameter "provider" when the handler
// is mounted under chi with that parameter, else from the last segment of the
// request path. Known providers are github, gitlab, gitea (also for Forgejo)
// and generic.
//
// # Verification
//
// Every request is verified against the shared secret, compared in constant
// time:
//
//   - github: X-Hub-Signature-256: sha256=HEX, the HMAC-SHA256 of the body.
//   - gitea: X-Gitea-Signature (or X-Forgejo-Signature): HEX, the HMAC-SHA256
//     of the body, without a prefix.
//   - gitlab: X-Gitlab-Token: the secret itself.
//   - generic: X-Kat-Signature: sha256=HEX, the HMAC-SHA256 of the body, as
//     computed by
//     `printf %s "$BODY" | openssl dgst -sha256 -hmac "$SECRET" | sed 's/^.* /sha256=/'`.
//
// An empty or unreadable secret refuses every webhook: unsigned requests are
// never accepted.
//
// # Events and payloads
//
// GitHub sends X-GitHub-Event: push (ping is answered 200 without dispatch),
// GitLab X-Gitlab-Event: Push Hook or Tag Push Hook, Gitea X-Gitea-Event (or
// X-Forgejo-Event): push. Other verified events are answered 200 and ignored.
// Payloads are JSON bodies, or the "payload" field of a form body
// (Content-Type application/x-www-form-urlencoded, which GitHub and Gitea can
// send); the signature always covers the raw body.
// The generic provider takes a JSON body
//
//	{"repository": "https://git.example.com/ops/config.git", "ref": "refs/heads/main", "after": "<sha>"}
//
// where a ref without a "refs/" prefix is taken as a branch name.
//
// # Status codes
//
// Errors use the API's JSON shape {"error", "message", "details"}:
//
//   - 202: verified and dispatched to at least one source.
//   - 200: verified ping or ignored event.
//   - 400: malformed payload, or an unknown provider.
//   - 401: missing or bad signature, or no secret configured.
//   - 404: no source matches the repository and ref.
//   - 405: a method other than POST.
//   - 413: the body is larger than MaxBodyBytes.
//   - 429: the client address sent more than RateLimit requests in RateWindow.
//   - 503: the dispatcher failed or timed out, or the secret could not be read.
//
// Each rejection is logged once with its reason (never the secret or a
// signature) and counted per provider and outcome; [Handler.Stats] returns
// the counts. Rate-limited requests are logged at most 10 a minute, so a
// flood cannot fill the log; they are all counted.
//
// # Bursts
//
// The handler dispatches every verified push. Coalescing a burst of pushes
// into one fetch is the dispatcher's job: gitsync wakes its source through a
// one-slot channel with a non-blocking send, so DispatchPush returns at once.
package webhook
