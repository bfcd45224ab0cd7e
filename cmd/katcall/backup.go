package main

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
)

func newBackupCommand(g *globals) *cobra.Command {
	var output string
	cmd := &cobra.Command{
		Use:   "backup",
		Short: "Snapshot the cluster's etcd on the leader now and print the snapshot's path",
		Long: `backup asks the leader to write an etcd snapshot into cluster.kat's backupPath now,
as it does every backupIntervalMinutes, and prints the file's path on the leader node.
The snapshot is checked before it gets its final name, and older snapshots beyond
backupRetention are deleted. Copy snapshots off the node yourself; restore one with
kat-agent restore.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			f, err := parseFormat(output)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			b, err := c.Backup(cmd.Context())
			if err != nil {
				return err
			}
			if f != formatTable {
				return printData(g.stdout, f, b)
			}
			fmt.Fprintln(g.stdout, b.Path)
			return nil
		},
	}
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table (the path alone), json or yaml")
	return cmd
}

// backupLine summarises the leader's backups for katcall status.
func backupLine(st *api.BackupStatus, now time.Time) string {
	if st == nil {
		return "none yet"
	}
	s := "none yet"
	if b := st.Last; b != nil {
		s = fmt.Sprintf("%s ago on %s: %s (%d KiB, revision %d)", age(now, b.Time), b.Node, b.Path, (b.Size+1023)/1024, b.Revision)
	}
	if st.Error != "" {
		s += fmt.Sprintf("; last attempt %s ago failed: %s", age(now, st.LastAttempt), firstLine(st.Error))
	}
	return s
}
