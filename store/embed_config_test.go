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
