package store

import (
	"fmt"
	"net"
	"net/url"
	"slices"
	"strings"

	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
)

// etcdConfig validates c, applies the defaults and builds etcd's config.
func (c EmbedConfig) etcdConfig() (*embed.Config, error) {
	if c.DataDir == "" {
		return nil, fmt.Errorf("%w: DataDir is required", ErrInvalidConfig)
	}
	name := c.Name
	if name == "" {
		name = DefaultMemberName
	}
	listenClient, err := parseURLs("ListenClientURLs", c.ListenClientURLs, DefaultListenClientURL, true)
	if err != nil {
		return nil, err
	}
	listenPeer, err := parseURLs("ListenPeerURLs", c.ListenPeerURLs, DefaultListenPeerURL, true)
	if err != nil {
		return nil, err
	}
	advClient, err := parseURLs("AdvertiseClientURLs", c.AdvertiseClientURLs, "", false)
	if err != nil {
		return nil, err
	}
	if len(advClient) == 0 {
		advClient = listenClient
	}
	advPeer, err := parseURLs("AdvertisePeerURLs", c.AdvertisePeerURLs, "", false)
	if err != nil {
		return nil, err
	}
	if len(advPeer) == 0 {
		advPeer = listenPeer
	}
	clientTLS, err := tlsInfo("ClientTLS", c.ClientTLS, listenClient)
	if err != nil {
		return nil, err
	}
	peerTLS, err := tlsInfo("PeerTLS", c.PeerTLS, listenPeer)
	if err != nil {
		return nil, err
	}

	cfg := embed.NewConfig()
	cfg.Name = name
	cfg.Dir = c.DataDir
	cfg.ListenClientUrls = bindable(listenClient)
	cfg.AdvertiseClientUrls = advClient
	cfg.ListenPeerUrls = bindable(listenPeer)
	cfg.AdvertisePeerUrls = advPeer
	cfg.InitialCluster = c.InitialCluster
	if cfg.InitialCluster == "" {
		cfg.InitialCluster = cfg.InitialClusterFromName(name)
	}
	cfg.InitialClusterToken = orDefault(c.InitialClusterToken, DefaultInitialClusterToken)
	cfg.ClusterState = orDefault(c.ClusterState, embed.ClusterStateFlagNew)
	if cfg.ClusterState != embed.ClusterStateFlagNew && cfg.ClusterState != embed.ClusterStateFlagExisting {
		return nil, fmt.Errorf("%w: ClusterState %q must be %q or %q", ErrInvalidConfig,
			cfg.ClusterState, embed.ClusterStateFlagNew, embed.ClusterStateFlagExisting)
	}
	cfg.ClientTLSInfo = clientTLS
	cfg.PeerTLSInfo = peerTLS
	cfg.QuotaBackendBytes = c.QuotaBackendBytes
	if cfg.QuotaBackendBytes <= 0 {
		cfg.QuotaBackendBytes = DefaultQuotaBackendBytes
	}
	cfg.AutoCompactionMode = orDefault(c.AutoCompactionMode, DefaultAutoCompactionMode)
	if cfg.AutoCompactionMode != embed.CompactorModeRevision && cfg.AutoCompactionMode != embed.CompactorModePeriodic {
		return nil, fmt.Errorf("%w: AutoCompactionMode %q must be %q or %q", ErrInvalidConfig,
			cfg.AutoCompactionMode, embed.CompactorModeRevision, embed.CompactorModePeriodic)
	}
	cfg.AutoCompactionRetention = orDefault(c.AutoCompactionRetention, DefaultAutoCompactionRetention)
	cfg.EnableGRPCGateway = false
	cfg.UnsafeNoFsync = c.UnsafeNoFsync
	if c.ElectionMs != 0 {
		// etcd wants the election timeout at least five heartbeats.
		if c.ElectionMs < 5*cfg.TickMs {
			return nil, fmt.Errorf("%w: ElectionMs %d must be at least %d (five heartbeats of %d ms)", ErrInvalidConfig, c.ElectionMs, 5*cfg.TickMs, cfg.TickMs)
		}
		cfg.ElectionMs = c.ElectionMs
	}
	cfg.SnapshotCatchUpEntries = c.SnapshotCatchUpEntries
	if cfg.SnapshotCatchUpEntries == 0 {
		cfg.SnapshotCatchUpEntries = DefaultSnapshotCatchUpEntries
	}
	cfg.Logger = "zap"
	cfg.LogLevel = "warn"
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(zapLogger(c.LogOutput))
	return cfg, nil
}

// parseURLs parses one URL list field, applying def when it is empty.
func parseURLs(field string, in []string, def string, listen bool) ([]url.URL, error) {
	if len(in) == 0 && def != "" {
		in = []string{def}
	}
	out := make([]url.URL, 0, len(in))
	for _, s := range in {
		u, err := url.Parse(s)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrInvalidConfig, field, err)
		}
		switch u.Scheme {
		case "http", "https":
			host, _, err := net.SplitHostPort(u.Host)
			if err != nil {
				return nil, fmt.Errorf("%w: %s: %q must be scheme://host:port: %w", ErrInvalidConfig, field, s, err)
			}
			if u.Path != "" && u.Path != "/" {
				return nil, fmt.Errorf("%w: %s: %q must not have a path", ErrInvalidConfig, field, s)
			}
			u.Path = ""
			if listen && host != "localhost" && net.ParseIP(host) == nil {
				return nil, fmt.Errorf("%w: %s: %q must use an IP address to listen on", ErrInvalidConfig, field, s)
			}
		case "unix", "unixs":
			if unixPath(*u) == "" {
				return nil, fmt.Errorf("%w: %s: %q has no socket path", ErrInvalidConfig, field, s)
			}
		default:
			return nil, fmt.Errorf("%w: %s: %q must be http, https, unix or unixs", ErrInvalidConfig, field, s)
		}
		out = append(out, *u)
	}
	return out, nil
}

// unixPath returns the socket path of a unix URL: "unix:///abs/path" has it
// in Path, etcd's legacy "unix://name:port" in Host.
func unixPath(u url.URL) string {
	return u.Host + u.Path
}

// bindable rewrites unix URLs so etcd binds the right path: its peer
// listener binds URL.Host only, which is empty for "unix:///abs/path".
func bindable(us []url.URL) []url.URL {
	out := make([]url.URL, len(us))
	for i, u := range us {
		if (u.Scheme == "unix" || u.Scheme == "unixs") && u.Path != "" {
			u.Host, u.Path = unixPath(u), ""
		}
		out[i] = u
	}
	return out
}

// tlsInfo validates one TLSFiles field against the URLs it protects.
func tlsInfo(field string, f *TLSFiles, us []url.URL) (transport.TLSInfo, error) {
	for _, u := range us {
		secure := u.Scheme == "https" || u.Scheme == "unixs"
		if f == nil && secure {
			return transport.TLSInfo{}, fmt.Errorf("%w: %s is required for %s", ErrInvalidConfig, field, u.String())
		}
		if f != nil && !secure {
			return transport.TLSInfo{}, fmt.Errorf("%w: %s is set but %s is not https or unixs", ErrInvalidConfig, field, u.String())
		}
	}
	if f == nil {
		return transport.TLSInfo{}, nil
	}
	var missing []string
	for _, p := range []struct{ name, v string }{{"CertFile", f.CertFile}, {"KeyFile", f.KeyFile}, {"TrustedCAFile", f.TrustedCAFile}} {
		if p.v == "" {
			missing = append(missing, p.name)
		}
	}
	if len(missing) > 0 {
		return transport.TLSInfo{}, fmt.Errorf("%w: %s: %s required", ErrInvalidConfig, field, strings.Join(missing, ", "))
	}
	return transport.TLSInfo{
		CertFile:       f.CertFile,
		KeyFile:        f.KeyFile,
		TrustedCAFile:  f.TrustedCAFile,
		ClientCertAuth: true,
		AllowedCNs:     slices.Clone(f.AllowedCNs),
	}, nil
}

// orDefault returns v, or def when v is empty.
func orDefault(v, def string) string {
	if v == "" {
		return def
	}
	return v
}
