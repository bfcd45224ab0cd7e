package webhook

import (
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"net/http"
	"strings"

	"kat.dws.rip/kat/api"
)

// Signature and event headers.
const (
	headerGitHubSignature  = "X-Hub-Signature-256"
	headerGiteaSignature   = "X-Gitea-Signature"
	headerForgejoSignature = "X-Forgejo-Signature"
	headerGitLabToken      = "X-Gitlab-Token"
	headerKatSignature     = "X-Kat-Signature"

	headerGitHubEvent  = "X-GitHub-Event"
	headerGitLabEvent  = "X-Gitlab-Event"
	headerGiteaEvent   = "X-Gitea-Event"
	headerForgejoEvent = "X-Forgejo-Event"
)

// Sign returns the generic provider's X-Kat-Signature value for body:
// "sha256=" and the hex HMAC-SHA256 of body keyed with secret. GitHub's
// X-Hub-Signature-256 has the same form.
func Sign(secret, body []byte) string {
	return "sha256=" + hex.EncodeToString(mac(secret, body))
}

func mac(secret, body []byte) []byte {
	m := hmac.New(sha256.New, secret)
	m.Write(body)
	return m.Sum(nil)
}

// verify checks the provider's signature or token of body against secret, in
// constant time. It never puts the secret or the signature into its answer.
func verify(provider string, h http.Header, body, secret []byte) *rejection {
	if len(secret) == 0 {
		return reject(OutcomeNoSecret, http.StatusUnauthorized, api.CodeUnauthorized,
			"webhook cannot be verified: no webhook secret is configured")
	}
	var header, got string
	switch provider {
	case ProviderGitHub:
		header, got = headerGitHubSignature, h.Get(headerGitHubSignature)
	case ProviderGeneric:
		header, got = headerKatSignature, h.Get(headerKatSignature)
	case ProviderGitea:
		header, got = headerGiteaSignature, h.Get(headerGiteaSignature)
		if got == "" {
			header, got = headerForgejoSignature, h.Get(headerForgejoSignature)
		}
	case ProviderGitLab:
		header, got = headerGitLabToken, h.Get(headerGitLabToken)
	}
	if got == "" {
		return reject(OutcomeMissingSignature, http.StatusUnauthorized, api.CodeUnauthorized,
			"missing %s header", header)
	}
	bad := reject(OutcomeBadSignature, http.StatusUnauthorized, api.CodeUnauthorized, "%s does not match", header)
	switch provider {
	case ProviderGitLab:
		// Hash both sides so the comparison does not leak the length.
		a, b := sha256.Sum256([]byte(got)), sha256.Sum256(secret)
		if subtle.ConstantTimeCompare(a[:], b[:]) != 1 {
			return bad
		}
		return nil
	case ProviderGitHub, ProviderGeneric:
		hexSig, ok := strings.CutPrefix(got, "sha256=")
		if !ok {
			return bad
		}
		got = hexSig
	}
	sig, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(sig, mac(secret, body)) {
		return bad
	}
	return nil
}

type eventKind int

const (
	eventPush eventKind = iota
	eventPing
	eventIgnored
)

// event classifies the provider's event header. The generic provider only
// sends pushes.
func event(provider string, h http.Header) eventKind {
	switch provider {
	case ProviderGitHub:
		switch h.Get(headerGitHubEvent) {
		case "push":
			return eventPush
		case "ping":
			return eventPing
		}
		return eventIgnored
	case ProviderGitLab:
		switch h.Get(headerGitLabEvent) {
		case "Push Hook", "Tag Push Hook":
			return eventPush
		}
		return eventIgnored
	case ProviderGitea:
		e := h.Get(headerGiteaEvent)
		if e == "" {
			e = h.Get(headerForgejoEvent)
		}
		if e == "push" {
			return eventPush
		}
		return eventIgnored
	}
	return eventPush
}
