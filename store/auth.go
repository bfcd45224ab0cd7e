package store

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"go.etcd.io/etcd/api/v3/authpb"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// RootUser is etcd's superuser. With authentication on and client
// certificates required, a client whose certificate has this common name
// may do everything, so no other identity (a node) may take the name.
const RootUser = "root"

// ErrPermissionDenied is what etcd answers a user whose roles do not grant
// the key range asked for (errors.Is matches it through the store's
// wrapping).
var ErrPermissionDenied = rpctypes.ErrPermissionDenied

// Grant is one permission of a user's role: a key or a key prefix, read
// only or read and write.
type Grant struct {
	// Key is the key, or with Prefix the prefix. Required.
	Key string
	// Prefix extends the grant to every key starting with Key. A range
	// read (List, Watch) must fall inside one grant.
	Prefix bool
	// Write allows writes (Put, Delete, transactions) besides reads.
	Write bool
}

// permission is the etcd form of g.
func (g Grant) permission() (key, end string, typ clientv3.PermissionType) {
	end = ""
	if g.Prefix {
		end = clientv3.GetPrefixRangeEnd(g.Key)
	}
	typ = clientv3.PermissionType(clientv3.PermRead)
	if g.Write {
		typ = clientv3.PermissionType(clientv3.PermReadWrite)
	}
	return g.Key, end, typ
}

// userRole is the role holding the grants of user name.
func userRole(name string) string { return "user-" + name }

// EnableAuth turns etcd authentication on, first creating the root user
// and role it needs. Users are the common names of client certificates
// (the client URLs must require them, as EmbedConfig.ClientTLS does), so
// none has a password; the store's own client must hold a certificate for
// RootUser or auth turned on locks it out. It is idempotent: a cluster
// whose auth is on already is left as it is.
func (s *Etcd) EnableAuth(ctx context.Context) error {
	st, err := s.cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("enable etcd auth: read its status: %w", err)
	}
	if st.Enabled {
		return nil
	}
	if err := s.ensureUser(ctx, RootUser, RootUser); err != nil {
		return fmt.Errorf("enable etcd auth: %w", err)
	}
	if _, err := s.cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable etcd auth: %w", err)
	}
	return nil
}

// AuthEnabled reports whether etcd authentication is on.
func (s *Etcd) AuthEnabled(ctx context.Context) (bool, error) {
	st, err := s.cli.AuthStatus(ctx)
	if err != nil {
		return false, fmt.Errorf("read etcd auth status: %w", err)
	}
	return st.Enabled, nil
}

// EnsureUser makes user name (a client certificate's common name) hold
// exactly grants, through a role of its own: missing grants are added and
// others revoked, so calling it again with a changed list converges.
// RootUser is refused.
func (s *Etcd) EnsureUser(ctx context.Context, name string, grants []Grant) error {
	if name == "" || name == RootUser {
		return fmt.Errorf("ensure etcd user %q: %w: the name must be set and not %q", name, ErrInvalidArgument, RootUser)
	}
	role := userRole(name)
	if err := s.ensureUser(ctx, name, role); err != nil {
		return fmt.Errorf("ensure etcd user %q: %w", name, err)
	}
	have, err := s.cli.RoleGet(ctx, role)
	if err != nil {
		return fmt.Errorf("ensure etcd user %q: read role %s: %w", name, role, err)
	}
	var want []*authpb.Permission
	for _, g := range grants {
		key, end, typ := g.permission()
		want = append(want, &authpb.Permission{PermType: authpb.Permission_Type(typ), Key: []byte(key), RangeEnd: []byte(end)})
		if slices.ContainsFunc(have.Perm, func(p *authpb.Permission) bool { return samePermission(p, want[len(want)-1]) }) {
			continue
		}
		if _, err := s.cli.RoleGrantPermission(ctx, role, key, end, typ); err != nil {
			return fmt.Errorf("ensure etcd user %q: grant %s: %w", name, key, err)
		}
	}
	for _, p := range have.Perm {
		// A grant of the same range with another type was replaced above.
		if slices.ContainsFunc(want, func(w *authpb.Permission) bool { return sameRange(p, w) }) {
			continue
		}
		_, err := s.cli.RoleRevokePermission(ctx, role, string(p.Key), string(p.RangeEnd))
		if err != nil && !errors.Is(err, rpctypes.ErrPermissionNotGranted) {
			return fmt.Errorf("ensure etcd user %q: revoke %s: %w", name, p.Key, err)
		}
	}
	return nil
}

// RemoveUser deletes user name and its role: connections it holds open
// lose every right at their next request. A user that does not exist is
// not an error.
func (s *Etcd) RemoveUser(ctx context.Context, name string) error {
	if name == "" || name == RootUser {
		return fmt.Errorf("remove etcd user %q: %w: the name must be set and not %q", name, ErrInvalidArgument, RootUser)
	}
	if _, err := s.cli.UserDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("remove etcd user %q: %w", name, err)
	}
	if _, err := s.cli.RoleDelete(ctx, userRole(name)); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("remove etcd user %q: delete its role: %w", name, err)
	}
	return nil
}

// ensureUser creates user name without a password and role, and grants
// the role to the user, each step only when missing.
func (s *Etcd) ensureUser(ctx context.Context, name, role string) error {
	if _, err := s.cli.RoleAdd(ctx, role); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("add role %s: %w", role, err)
	}
	u, err := s.cli.UserGet(ctx, name)
	switch {
	case errors.Is(err, rpctypes.ErrUserNotFound):
		if _, err := s.cli.UserAddWithOptions(ctx, name, "", &clientv3.UserAddOptions{NoPassword: true}); err != nil {
			return fmt.Errorf("add user: %w", err)
		}
	case err != nil:
		return fmt.Errorf("read user: %w", err)
	case slices.Contains(u.Roles, role):
		return nil
	}
	if _, err := s.cli.UserGrantRole(ctx, name, role); err != nil {
		return fmt.Errorf("grant role %s: %w", role, err)
	}
	return nil
}

// samePermission reports whether a and b grant the same range the same way.
func samePermission(a, b *authpb.Permission) bool {
	return a.PermType == b.PermType && sameRange(a, b)
}

// sameRange reports whether a and b are about the same keys.
func sameRange(a, b *authpb.Permission) bool {
	return string(a.Key) == string(b.Key) && string(a.RangeEnd) == string(b.RangeEnd)
}
