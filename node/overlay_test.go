package node

import (
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/rs/zerolog"
	"golang.zx2c4.com/wireguard/wgctrl/wgtypes"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/netstack"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/store/resources"
)

// TestOverlayRecords: every node gets a WireGuard key file (0600) kept
// across restarts and a subnet of clusterCIDR; a join carrying a public key
// and port records key and endpoint (the registered address and the port);
// a join with an invalid key is refused with 400 naming the field and
// registers nothing; a status report's overlay brings a node that joined
// without one up to date, with its registered address.
func TestOverlayRecords(t *testing.T) {
	t.Parallel()
	leader, lo := runLeader(t, t.TempDir())
	ctx := t.Context()
	keyFile := filepath.Join(lo.DataDir, netstack.KeyFileName)
	fi, err := os.Stat(keyFile)
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the leader's key file: %v, %v; want mode 0600", fi, err)
	}
	own, err := leader.repo.GetNodeNetwork(ctx, "n1")
	if err != nil || own.Subnet.String() != "10.123.0.0/23" || own.PublicKey != "" {
		t.Fatalf("the leader's overlay record (overlay off): %+v, %v; want the first subnet and no key", own, err)
	}

	tokenFile := filepath.Join(lo.DataDir, "join.token")
	tok, err := pki.ParseJoinToken(string(readFile(t, tokenFile)))
	must(t, err)
	key, err := wgtypes.GeneratePrivateKey()
	must(t, err)
	join := func(name, pub string, port int) error {
		csr, _, err := pki.NewCSR(name, nil, nil)
		must(t, err)
		_, err = apiclient.Join(ctx, fmt.Sprintf("https://127.0.0.1:%d", lo.APIPort), tok, api.JoinRequest{
			NodeName: name, NodeUID: "uid-" + name, CSR: string(csr), AdvertiseAddress: "192.0.2.7", AgentPort: 9116,
			WireGuardPublicKey: pub, WireGuardPort: port,
		})
		return err
	}
	if err := join("w1", key.PublicKey().String(), 51999); err != nil {
		t.Fatal(err)
	}
	got, err := leader.repo.GetNodeNetwork(ctx, "w1")
	want := api.NodeNetwork{Node: "w1", Subnet: got.Subnet, PublicKey: key.PublicKey().String(), Endpoint: "192.0.2.7:51999"}
	if err != nil || *got != want || got.Subnet.String() != "10.123.2.0/23" {
		t.Fatalf("w1's overlay record: %+v, %v; want %+v in 10.123.2.0/23", got, err, want)
	}

	err = join("w2", "not-a-key", 51820)
	var apiErr *api.Error
	if !errors.As(err, &apiErr) || apiErr.StatusCode != http.StatusBadRequest || !strings.Contains(err.Error(), "wireGuardPublicKey") {
		t.Fatalf("join with a bad key: %v, want 400 naming wireGuardPublicKey", err)
	}
	if _, err := leader.repo.GetNodeRegistration(ctx, "w2"); !errors.Is(err, resources.ErrNotFound) {
		t.Fatalf("a refused join registered w2: %v", err)
	}

	// A node that joined before the overlay: no key until it reports one.
	if err := join("w3", "", 0); err != nil {
		t.Fatal(err)
	}
	if got, err := leader.repo.GetNodeNetwork(ctx, "w3"); err != nil || got.PublicKey != "" || !got.Subnet.IsValid() {
		t.Fatalf("w3 joined without a key: %+v, %v; want a subnet and no key", got, err)
	}
	must(t, leader.recordOverlay(ctx, "w3", api.NodeOverlay{PublicKey: key.PublicKey().String(), Port: 51820}))
	if got, err := leader.repo.GetNodeNetwork(ctx, "w3"); err != nil || got.PublicKey != key.PublicKey().String() || got.Endpoint != "192.0.2.7:51820" {
		t.Fatalf("w3 after its report: %+v, %v", got, err)
	}
}

// TestOverlayOptionsAreKept: --wg-* given at init are saved and used by a
// restart without them; given again, they replace the saved ones; the key
// file is reused.
func TestOverlayOptionsAreKept(t *testing.T) {
	t.Parallel()
	o := testOptions(t, t.TempDir())
	o.Overlay = OverlayOptions{Interface: "kx1", Port: 51999, Mode: "off"}
	n, err := Open(t.Context(), o, zerolog.Nop())
	must(t, err)
	key := n.wgKey
	if got := n.state.overlay(); got != o.Overlay {
		t.Errorf("overlay after init %+v, want %+v", got, o.Overlay)
	}
	o.Overlay = OverlayOptions{}
	n = reopen(t, n, o)
	if got, want := n.state.overlay(), (OverlayOptions{Interface: "kx1", Port: 51999, Mode: "off"}); got != want {
		t.Errorf("overlay after a restart without flags %+v, want the saved %+v", got, want)
	}
	if n.wgKey != key {
		t.Error("a restart made a new WireGuard key")
	}
	o.Overlay = OverlayOptions{Port: 52000}
	n = reopen(t, n, o)
	if got, want := n.state.overlay(), (OverlayOptions{Interface: "kx1", Port: 52000, Mode: "off"}); got != want {
		t.Errorf("overlay after a restart with --wg-port %+v, want %+v", got, want)
	}
	if got := (&nodeState{}).overlay(); got != (OverlayOptions{Interface: "kat0", Port: 51820, Mode: "auto"}) {
		t.Errorf("defaults of a node from before the overlay: %+v", got)
	}
}
