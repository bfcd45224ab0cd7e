package netstack

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/pki"
)

// KeyFileName is the private key's file in a node's data directory.
const KeyFileName = "wg_private.key"

// LoadOrCreateKey returns the WireGuard private key stored at path (base64,
// as wg genkey writes it), creating one with mode 0600 when the file does not
// exist. A key file readable by others than its owner is refused: the key is
// the node's overlay identity.
func LoadOrCreateKey(path string) (wgtypes.Key, error) {
	b, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err := wgtypes.GeneratePrivateKey()
		if err != nil {
			return wgtypes.Key{}, fmt.Errorf("generate a WireGuard key: %w", err)
		}
		if err := pki.WriteFileAtomic(path, []byte(key.String()+"\n"), 0o600); err != nil {
			return wgtypes.Key{}, fmt.Errorf("write the WireGuard key: %w", err)
		}
		return key, nil
	}
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("read the WireGuard key: %w", err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("read the WireGuard key: %w", err)
	}
	if fi.Mode().Perm()&0o077 != 0 {
		return wgtypes.Key{}, fmt.Errorf("WireGuard key %s: mode %04o lets others read it; chmod 600 it", path, fi.Mode().Perm())
	}
	key, err := wgtypes.ParseKey(strings.TrimSpace(string(b)))
	if err != nil {
		return wgtypes.Key{}, fmt.Errorf("WireGuard key %s: %w", path, err)
	}
	return key, nil
}
