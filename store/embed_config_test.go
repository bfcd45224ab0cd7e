package store

import "testing"

// TestEtcdConfigSnapshotCatchUpEntries: the embedded member keeps
// DefaultSnapshotCatchUpEntries raft entries in memory for slow followers
// unless told otherwise.
func TestEtcdConfigSnapshotCatchUpEntries(t *testing.T) {
	for _, tc := range []struct {
		name  string
		given uint64
		want  uint64
	}{
		{"default", 0, DefaultSnapshotCatchUpEntries},
		{"given", 1000, 1000},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := EmbedConfig{DataDir: t.TempDir(), SnapshotCatchUpEntries: tc.given}.etcdConfig()
			if err != nil {
				t.Fatal(err)
			}
			if cfg.SnapshotCatchUpEntries != tc.want {
				t.Errorf("SnapshotCatchUpEntries = %d, want %d", cfg.SnapshotCatchUpEntries, tc.want)
			}
		})
	}
}

// TestEtcdConfigElectionMs: etcd's election timeout unless given; one of
// fewer than five heartbeats is refused.
func TestEtcdConfigElectionMs(t *testing.T) {
	for _, tc := range []struct {
		name    string
		given   uint
		want    uint
		wantErr bool
	}{
		{"default", 0, 1000, false},
		{"given", 500, 500, false},
		{"under five heartbeats", 300, 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := EmbedConfig{DataDir: t.TempDir(), ElectionMs: tc.given}.etcdConfig()
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ElectionMs %d accepted", tc.given)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if cfg.ElectionMs != tc.want {
				t.Errorf("ElectionMs = %d, want %d", cfg.ElectionMs, tc.want)
			}
		})
	}
}
