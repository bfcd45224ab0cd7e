package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/netip"
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

// NetworkInfo is what `podman network inspect` says of a network, the part
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
		if _, err := p.run(ctx, "network", "rm", spec.Name); err != nil {
			if inUse(err) {
				return false, fmt.Errorf("%w: network %s has subnet %v, wants %s: %w", ErrNetworkInUse, spec.Name, cur.Subnets, spec.Subnet.Masked(), err)
			}
			return false, fmt.Errorf("remove network %s to recreate it: %w", spec.Name, err)
		}
	case !errors.Is(err, ErrNetworkNotFound):
		return false, err
	}
	if _, err := p.run(ctx, "network", "create", "--driver", "bridge", "--disable-dns",
		"--subnet", spec.Subnet.Masked().String(), "--gateway", spec.Gateway.String(), spec.Name); err != nil {
		return false, fmt.Errorf("create network %s: %w", spec.Name, err)
	}
	return true, nil
}

// ErrNetworkNotFound means a network does not exist.
var ErrNetworkNotFound = errors.New("runtime: network not found")

// InspectNetwork returns what EnsureNetwork compares of network name, or an
// error wrapping ErrNetworkNotFound.
func (p *Podman) InspectNetwork(ctx context.Context, name string) (*NetworkInfo, error) {
	out, err := p.run(ctx, "network", "inspect", name)
	if err != nil {
		if strings.Contains(strings.ToLower(stderrOf(err)), "network not found") {
			return nil, fmt.Errorf("%w: %s", ErrNetworkNotFound, name)
		}
		return nil, fmt.Errorf("inspect network %s: %w", name, err)
	}
	var nets []NetworkInfo
	if err := json.Unmarshal(out, &nets); err != nil {
		return nil, fmt.Errorf("inspect network %s: decode podman's output: %w", name, err)
	}
	if len(nets) != 1 {
		return nil, fmt.Errorf("%w: %s", ErrNetworkNotFound, name)
	}
	return &nets[0], nil
}

// RemoveNetwork removes network name; a missing one is not an error, one
// that containers use wraps ErrNetworkInUse.
func (p *Podman) RemoveNetwork(ctx context.Context, name string) error {
	_, err := p.run(ctx, "network", "rm", name)
	switch {
	case err == nil || strings.Contains(strings.ToLower(stderrOf(err)), "network not found"):
		return nil
	case inUse(err):
		return fmt.Errorf("%w: %w", ErrNetworkInUse, err)
	}
	return fmt.Errorf("remove network %s: %w", name, err)
}

func stderrOf(err error) string {
	var ce *CommandError
	if errors.As(err, &ce) {
		return ce.Stderr
	}
	return ""
}

// inUse reports whether podman refused to remove a network for its
// containers (podman 4.3: "... has associated containers with it ...
// network is being used").
func inUse(err error) bool {
	s := strings.ToLower(stderrOf(err))
	return strings.Contains(s, "associated containers") || strings.Contains(s, "is being used")
}
