package main

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/pki"
	"kat.dws.rip/kat/quadlet"
)

func newMetricsCertCommand(g *globals) *cobra.Command {
	var (
		outDir    string
		days      int
		overwrite bool
	)
	cmd := &cobra.Command{
		Use:   "metrics-cert NAME",
		Short: "Issue a client certificate that may scrape /metrics on every node and nothing else",
		Long: `metrics-cert makes a key on this machine and has the leader sign a client certificate
for it with the cluster CA, named kat-metrics:NAME. Prometheus (or another scraper)
presents it to scrape /metrics on every node's agent port and every member's API
port; any other route of either port answers it 403, and etcd knows no such user.

It writes NAME.crt, NAME.key (mode 0600) and ca.crt, the cluster CA to verify the
nodes with, into --out-dir. Nothing revokes the certificate before it expires:
keep the key as you would a token, and choose --days to match.`,
		Example: `  katcall metrics-cert prometheus --out-dir /etc/prometheus/kat`,
		Args:    cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			name := args[0]
			if msg := quadlet.DNSLabelProblem(name); msg != "" {
				return fmt.Errorf("NAME: %s", msg)
			}
			if days < 1 || days > api.MaxMetricsCertDays {
				return fmt.Errorf("--days: must be 1 to %d, got %d", api.MaxMetricsCertDays, days)
			}
			certPath, keyPath, caPath := filepath.Join(outDir, name+".crt"), filepath.Join(outDir, name+".key"), filepath.Join(outDir, "ca.crt")
			if !overwrite {
				for _, p := range []string{certPath, keyPath} {
					if _, err := os.Stat(p); err == nil {
						return fmt.Errorf("%s exists: give --overwrite to replace it", p)
					} else if !errors.Is(err, fs.ErrNotExist) {
						return fmt.Errorf("check %s: %w", p, err)
					}
				}
			}
			csrPEM, keyPEM, err := pki.NewCSR(api.MetricsCertPrefix+name, nil, nil)
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			resp, err := c.IssueMetricsCert(cmd.Context(), name, csrPEM, days)
			if err != nil {
				return err
			}
			if err := os.MkdirAll(outDir, 0o755); err != nil {
				return fmt.Errorf("--out-dir: %w", err)
			}
			// The key last: a certificate without its key is harmless.
			for _, f := range []struct {
				path string
				data []byte
				mode fs.FileMode
			}{{caPath, []byte(resp.CA), 0o644}, {certPath, []byte(resp.Certificate), 0o644}, {keyPath, keyPEM, 0o600}} {
				if err := pki.WriteFileAtomic(f.path, f.data, f.mode); err != nil {
					return fmt.Errorf("write %s: %w", f.path, err)
				}
			}
			fmt.Fprintf(g.stdout, "%s\n%s\n%s\n", certPath, keyPath, caPath)
			fmt.Fprintf(g.stderr, "kat-metrics:%s may scrape /metrics until %s; give the scraper cert_file, key_file and ca_file\n",
				name, resp.NotAfter.Format("2006-01-02"))
			return nil
		},
	}
	// NAME is new to the cluster: nothing to complete.
	cmd.ValidArgsFunction = cobra.NoFileCompletions
	cmd.Flags().StringVar(&outDir, "out-dir", ".", "directory to write NAME.crt, NAME.key and ca.crt into")
	_ = cmd.MarkFlagDirname("out-dir")
	cmd.Flags().IntVar(&days, "days", api.DefaultMetricsCertDays, "how many days the certificate is valid")
	cmd.Flags().BoolVar(&overwrite, "overwrite", false, "replace NAME.crt and NAME.key when they exist")
	return cmd
}
