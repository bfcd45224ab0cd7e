package runtime

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
)

// ErrNetworkInUse means a network must be recreated (its subnet or gateway
// changed) while containers still use it: it is left as it is until they
// are gone.
var ErrNetworkInUse = errors.New("runtime: network in use by containers")

// NetworkSpec is a Podman bridge network: the one a node's instances join,
// each at the address the leader gave it.
type NetworkSpec struct {
	// Name is the network's name, required: letters, digits, '_', '.' and
	// '-', starting with a letter or digit.
	Name string
	// Subnet is the network's IPv4 subnet, required (--subnet).
	Subnet netip.Prefix
	// Gateway is the bridge's address, required, inside Subnet
	// (--gateway).
	Gateway netip.Addr
}

// ValidateNetworkName says what is wrong with a Podman network name, if
// anything.
func ValidateNetworkName(name string) error {
	if len(name) > 253 || !containerNameRE.MatchString(name) {
		return fmt.Errorf("%q is not a valid network name (letters, digits, '_', '.', '-', starting with a letter or digit)", name)
	}
	return nil
}

// Validate checks a network spec. Its errors wrap ErrInvalidSpec and name
// the field.
func (s NetworkSpec) Validate() error {
	bad := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: network %s: %s", ErrInvalidSpec, field, fmt.Sprintf(format, a...))
	}
	switch {
	case s.Name == "":
		return bad("name", "is required")
	case ValidateNetworkName(s.Name) != nil:
		return bad("name", "%v", ValidateNetworkName(s.Name))
	case !s.Subnet.IsValid() || !s.Subnet.Addr().Is4():
		return bad("subnet", "%v is not an IPv4 subnet", s.Subnet)
	case s.Subnet.Bits() > 30:
		return bad("subnet", "%s holds no address besides its gateway (at most /30)", s.Subnet)
	case !s.Gateway.IsValid() || !s.Subnet.Contains(s.Gateway):
		return bad("gateway", "%v is not an address of subnet %s", s.Gateway, s.Subnet)
	}
	return nil
}

// NetworkInfo is what podman's inspect of a network says, the part
// EnsureNetwork compares.
type NetworkInfo struct {
	Name       string          `json:"name"`
	Driver     string          `json:"driver"`
	Subnets    []NetworkSubnet `json:"subnets"`
	DNSEnabled bool            `json:"dns_enabled"`
}

// NetworkSubnet is one subnet of a network, as podman writes it.
type NetworkSubnet struct {
	Subnet  string `json:"subnet"`
	Gateway string `json:"gateway"`
}

// matches reports whether the network is spec's: a bridge with exactly its
// subnet and gateway and DNS off.
func (n NetworkInfo) matches(spec NetworkSpec) bool {
	if n.Driver != "bridge" || n.DNSEnabled || len(n.Subnets) != 1 {
		return false
	}
	sub, err := netip.ParsePrefix(n.Subnets[0].Subnet)
	if err != nil || sub != spec.Subnet.Masked() {
		return false
	}
	gw, err := netip.ParseAddr(n.Subnets[0].Gateway)
	return err == nil && gw == spec.Gateway
}

// EnsureNetwork makes the network spec.Name a bridge with spec's subnet and
// gateway and DNS off (no aardvark-dns on the gateway: the node's own DNS
// server serves its containers). A missing network is created; one that
// differs is removed and created again while no container uses it, and is
// otherwise left as it is with an error wrapping ErrNetworkInUse. It
// returns whether it created the network.
func (p *Podman) EnsureNetwork(ctx context.Context, spec NetworkSpec) (bool, error) {
	if err := spec.Validate(); err != nil {
		return false, err
	}
	cur, err := p.InspectNetwork(ctx, spec.Name)
	switch {
	case err == nil && cur.matches(spec):
		return false, nil
	case err == nil:
		if err := p.RemoveNetwork(ctx, spec.Name); err != nil {
			if errors.Is(err, ErrNetworkInUse) {
				return false, fmt.Errorf("%w: network %s has subnet %v, wants %s: %w", ErrNetworkInUse, spec.Name, cur.Subnets, spec.Subnet.Masked(), err)
			}
			return false, fmt.Errorf("remove network %s to recreate it: %w", spec.Name, err)
		}
	case !errors.Is(err, ErrNetworkNotFound):
		return false, err
	}
	body := map[string]any{"name": spec.Name, "driver": "bridge", "dns_enabled": false,
		"subnets": []NetworkSubnet{{Subnet: spec.Subnet.Masked().String(), Gateway: spec.Gateway.String()}}}
	if err := p.callJSON(ctx, request{op: "podman network create " + spec.Name, method: http.MethodPost, path: "/networks/create", body: body}, nil); err != nil {
		return false, fmt.Errorf("create network %s: %w", spec.Name, err)
	}
	return true, nil
}

// ErrNetworkNotFound means a network does not exist.
var ErrNetworkNotFound = errors.New("runtime: network not found")

// InspectNetwork returns what EnsureNetwork compares of network name, or an
// error wrapping ErrNetworkNotFound.
func (p *Podman) InspectNetwork(ctx context.Context, name string) (*NetworkInfo, error) {
	var n NetworkInfo
	err := p.callJSON(ctx, request{op: "podman network inspect " + name, method: http.MethodGet, path: pathOf("/networks/%s/json", name)}, &n)
	switch {
	case isStatus(err, http.StatusNotFound):
		return nil, fmt.Errorf("%w: %s", ErrNetworkNotFound, name)
	case err != nil:
		return nil, fmt.Errorf("inspect network %s: %w", name, err)
	}
	return &n, nil
}

// RemoveNetwork removes network name; a missing one is not an error, one
// that containers use wraps ErrNetworkInUse.
func (p *Podman) RemoveNetwork(ctx context.Context, name string) error {
	op := "podman network rm " + name
	var reports []struct {
		Err json.RawMessage `json:"Err"`
	}
	err := p.callJSON(ctx, request{op: op, method: http.MethodDelete, path: pathOf("/networks/%s", name)}, &reports)
	switch {
	case isStatus(err, http.StatusNotFound):
		return nil
	case inUse(err):
		return fmt.Errorf("%w: %w", ErrNetworkInUse, err)
	case err != nil:
		return fmt.Errorf("remove network %s: %w", name, err)
	case len(reports) == 0 || len(reports[0].Err) == 0 || string(reports[0].Err) == "null":
		return nil
	}
	// The service reports the failure without its message: containers
	// that use the network are the reason podman refuses.
	users, lerr := p.networkUsers(ctx, name)
	if lerr == nil && len(users) > 0 {
		return fmt.Errorf("%w: %s: network %s is used by containers %s", ErrNetworkInUse, op, name, strings.Join(users, ", "))
	}
	return fmt.Errorf("remove network %s: %s: the service refused (%s)", name, op, reports[0].Err)
}

// networkUsers returns the names of the containers (any, running or not)
// that join network name.
func (p *Podman) networkUsers(ctx context.Context, name string) ([]string, error) {
	q := url.Values{"all": {"true"}, "filters": {filtersQuery(map[string][]string{"network": {name}})}}
	var list []psEntry
	if err := p.callJSON(ctx, request{op: "podman ps --all", method: http.MethodGet, path: "/containers/json", query: q}, &list); err != nil {
		return nil, err
	}
	var names []string
	for _, c := range list {
		names = append(names, cmp.Or(strings.Join(c.Names, ","), c.ID))
	}
	return names, nil
}

// inUse reports whether podman refused to remove a network for its
// containers (podman 4.3: "... has associated containers with it ...
// network is being used").
func inUse(err error) bool {
	var ae *APIError
	if !errors.As(err, &ae) {
		return false
	}
	s := strings.ToLower(ae.Message)
	return strings.Contains(s, "associated containers") || strings.Contains(s, "is being used")
}
