package webhook

import (
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"kat.dws.rip/kat/gitx"
)

// Bounds of a parsed payload.
const (
	maxURLs      = 16
	maxURLLength = 2048
	maxRefLength = 1024
)

// gitRepo holds every URL form GitHub, Gitea and GitLab put in a repository
// or project object.
type gitRepo struct {
	CloneURL   string `json:"clone_url"`
	SSHURL     string `json:"ssh_url"`
	HTMLURL    string `json:"html_url"`
	GitURL     string `json:"git_url"`
	URL        string `json:"url"`
	GitHTTPURL string `json:"git_http_url"`
	GitSSHURL  string `json:"git_ssh_url"`
	HTTPURL    string `json:"http_url"`
	WebURL     string `json:"web_url"`
	Homepage   string `json:"homepage"`
}

func (r *gitRepo) urls() []string {
	if r == nil {
		return nil
	}
	return []string{r.CloneURL, r.SSHURL, r.GitHTTPURL, r.GitSSHURL, r.HTTPURL, r.GitURL, r.HTMLURL, r.WebURL, r.URL, r.Homepage}
}

// hostPayload is the part of a GitHub, Gitea or GitLab push payload KAT reads.
type hostPayload struct {
	Ref        string   `json:"ref"`
	After      string   `json:"after"`
	Repository *gitRepo `json:"repository"`
	Project    *gitRepo `json:"project"`
}

// genericPayload is the generic provider's body.
type genericPayload struct {
	Repository string `json:"repository"`
	Ref        string `json:"ref"`
	After      string `json:"after"`
}

// ParsePayload parses a push payload of provider into a [Push]. It checks
// that the payload names a repository and a ref, and bounds every field.
func ParsePayload(provider string, body []byte) (Push, error) {
	p := Push{Provider: provider}
	var urls []string
	switch provider {
	case ProviderGitHub, ProviderGitLab, ProviderGitea:
		var hp hostPayload
		if err := json.Unmarshal(body, &hp); err != nil {
			return Push{}, fmt.Errorf("decode json: %w", err)
		}
		p.Ref, p.After = hp.Ref, hp.After
		urls = append(hp.Project.urls(), hp.Repository.urls()...)
	case ProviderGeneric:
		var gp genericPayload
		if err := json.Unmarshal(body, &gp); err != nil {
			return Push{}, fmt.Errorf("decode json: %w", err)
		}
		p.Ref, p.After = gp.Ref, gp.After
		if p.Ref != "" && !strings.HasPrefix(p.Ref, "refs/") {
			p.Ref = "refs/heads/" + p.Ref
		}
		urls = []string{gp.Repository}
	default:
		return Push{}, fmt.Errorf("unknown provider %q", truncate(provider, 64))
	}
	for _, u := range urls {
		if u = strings.TrimSpace(u); u == "" {
			continue
		}
		if len(u) > maxURLLength || strings.ContainsAny(u, "\x00\r\n") {
			return Push{}, errors.New("repository url is too long or holds control characters")
		}
		if u = gitx.RedactURL(u); len(p.RepoURLs) < maxURLs && len(u) <= maxURLLength && !slices.Contains(p.RepoURLs, u) {
			p.RepoURLs = append(p.RepoURLs, u)
		}
	}
	if len(p.RepoURLs) == 0 {
		return Push{}, errors.New("payload names no repository url")
	}
	switch {
	case p.Ref == "":
		return Push{}, errors.New("payload has no ref")
	case len(p.Ref) > maxRefLength || !strings.HasPrefix(p.Ref, "refs/") || strings.ContainsAny(p.Ref, "\x00\r\n "):
		return Push{}, fmt.Errorf("ref %q is not a valid full ref name", truncate(p.Ref, 64))
	}
	if strings.Trim(p.After, "0") == "" {
		p.After = "" // no commit, or the all-zero id of a deleted ref
	} else if !isHex(p.After) || len(p.After) > 64 {
		return Push{}, fmt.Errorf("after %q is not a commit id", truncate(p.After, 64))
	}
	return p, nil
}

func isHex(s string) bool {
	for i := 0; i < len(s); i++ {
		if strings.IndexByte("0123456789abcdefABCDEF", s[i]) < 0 {
			return false
		}
	}
	return true
}
