package multinode

import (
	"fmt"
	"os"
	"testing"

	"kat.dws.rip/kat/scripts/e2e"
)

// binaries are the kat-agent and katcall every test's cluster runs, built
// once for the test binary.
var binaries e2e.Binaries

func TestMain(m *testing.M) {
	if os.Getenv(bareWGEnv) == "1" { // the overlay benchmark's floor
		if err := bareWireGuardMain(); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	var remove func()
	var err error
	if binaries, remove, err = e2e.BuildTemp(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	code := m.Run()
	remove()
	os.Exit(code)
}
