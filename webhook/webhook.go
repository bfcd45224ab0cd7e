package webhook

import (
	"context"
	"errors"
	"time"

	"github.com/rs/zerolog"
)

// Providers accepted in the last path segment.
const (
	ProviderGitHub  = "github"
	ProviderGitLab  = "gitlab"
	ProviderGitea   = "gitea"
	ProviderGeneric = "generic"
)

// Push is what a verified push webhook says: a hint, never trusted for content.
type Push struct {
	// Provider is github, gitlab, gitea or generic.
	Provider string
	// RepoURLs holds every URL form the payload names (clone_url, ssh_url,
	// html_url, git_http_url, ...), deduplicated, in payload order, at most
	// 16. Credentials are removed by gitx.RedactURL: an http(s) URL loses
	// its userinfo, any other its password.
	RepoURLs []string
	// Ref is the full ref that moved, e.g. refs/heads/main.
	Ref string
	// After is the new head commit; empty when the payload has none or the
	// ref was deleted.
	After string
}

// Dispatcher receives verified pushes. It returns how many sources matched
// (0 makes the handler answer 404). ctx is the request's, bounded by
// HandlerConfig.DispatchTimeout: DispatchPush must only wake the matching
// sources (the fetch runs on the dispatcher's own context) and coalescing
// bursts is its job, e.g. a one-slot channel with a non-blocking send.
type Dispatcher interface {
	DispatchPush(ctx context.Context, p Push) (matched int, err error)
}

// DispatcherFunc adapts a function to a [Dispatcher].
type DispatcherFunc func(ctx context.Context, p Push) (int, error)

// DispatchPush calls f.
func (f DispatcherFunc) DispatchPush(ctx context.Context, p Push) (int, error) { return f(ctx, p) }

// HandlerConfig holds what a [Handler] needs.
type HandlerConfig struct {
	// Secret returns the shared webhook secret; it is called on every request
	// so a rotated secret file is picked up. Required. An empty secret refuses
	// every webhook. See [SecretFile] and [StaticSecret].
	Secret func() ([]byte, error)
	// Dispatcher receives verified pushes. Required.
	Dispatcher Dispatcher
	// MaxBodyBytes caps the request body; more is a 413. Default 1 MiB.
	MaxBodyBytes int64
	// RateLimit is how many requests one client address may send per
	// RateWindow; more are a 429. Default 60.
	RateLimit int
	// RateWindow is the rate limit's window. Default one minute.
	RateWindow time.Duration
	// DispatchTimeout bounds one DispatchPush call. Default 10 seconds.
	DispatchTimeout time.Duration
	// Logger gets one line per rejection; the handler adds component=webhook.
	// Default: a disabled logger.
	Logger zerolog.Logger
	// Now is the clock, for tests. Default time.Now.
	Now func() time.Time
}

// Fanout returns a Dispatcher that hands every push to each of ds (config
// sources and app repositories, say) and adds up their matches: the handler
// answers 404 only when none matched. Every dispatcher sees the push even
// when another fails; the errors are joined.
func Fanout(ds ...Dispatcher) Dispatcher {
	return DispatcherFunc(func(ctx context.Context, p Push) (int, error) {
		total := 0
		var errs []error
		for _, d := range ds {
			n, err := d.DispatchPush(ctx, p)
			total += n
			if err != nil {
				errs = append(errs, err)
			}
		}
		return total, errors.Join(errs...)
	})
}

type pushObserverKey struct{}

// WithPushObserver returns a copy of ctx carrying fn: a [Handler] serving a
// request of that context calls fn with the push the request carried, once
// its signature is verified and its payload parsed, before dispatching it.
// The API server's audit log names the pushed repository this way.
func WithPushObserver(ctx context.Context, fn func(Push)) context.Context {
	return context.WithValue(ctx, pushObserverKey{}, fn)
}

// observePush calls the observer of ctx, if any, with p.
func observePush(ctx context.Context, p Push) {
	if fn, ok := ctx.Value(pushObserverKey{}).(func(Push)); ok && fn != nil {
		fn(p)
	}
}
