// Package storetest starts throwaway embedded etcd members for tests.
//
// Each call starts a real single-member etcd on unix sockets (no TCP port is
// taken), with its data in t.TempDir(), fsync off and logs discarded, and
// registers cleanups that close the store, then the server, then remove the
// socket directory.
//
//	func TestSomething(t *testing.T) {
//		st := storetest.New(t)
//		if err := st.Put(t.Context(), "/kat/x", []byte("1")); err != nil {
//			t.Fatal(err)
//		}
//	}
//
// # Customising the server
//
// Config returns the configuration New would use, for tests that change it
// or restart a member on the same data directory.
package storetest
