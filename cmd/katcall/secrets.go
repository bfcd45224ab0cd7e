package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	agelib "filippo.io/age"
	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
)

func newSecretCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret recipient|seal",
		Short: "Encrypt secrets for the cluster",
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "recipient",
		Short: "Print the cluster's age recipient: what secret files are encrypted to",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			c, err := g.client()
			if err != nil {
				return err
			}
			r, err := c.SecretsRecipient(cmd.Context())
			if err != nil {
				return err
			}
			fmt.Fprintln(g.stdout, r.Recipient)
			return nil
		},
	}, newSecretSealCommand(g))
	return cmd
}

type sealOptions struct {
	file, out, clusterRecipient string
	recipients                  []string
}

func newSecretSealCommand(g *globals) *cobra.Command {
	o := &sealOptions{}
	cmd := &cobra.Command{
		Use:   "seal -f SECRET.yaml [-o NAME.sops.yaml] [--recipient age1...]...",
		Short: "Encrypt a plaintext Secret for the cluster, here: the plaintext is never sent",
		Long: `seal checks a plaintext Secret (kind: Secret, stringData and data) as the leader
will, then encrypts its values to the cluster's age recipient in the SOPS format,
which sops and Flux also read. Commit the output under {namespace}/secrets/ of the
config repository, outside workload directories. Extra --recipient keys (yours)
let you decrypt and edit the file with sops.

The cluster's recipient is asked of the API, or given with --cluster-recipient to
work offline (katcall secret recipient prints it).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runSeal(cmd.Context(), g, o) },
	}
	cmd.Flags().StringVarP(&o.file, "file", "f", "", "the plaintext Secret file (required)")
	cmd.Flags().StringVarP(&o.out, "output", "o", "", "where to write the encrypted file (default: standard output)")
	cmd.Flags().StringVar(&o.clusterRecipient, "cluster-recipient", "", "the cluster's age recipient, instead of asking the API")
	cmd.Flags().StringArrayVar(&o.recipients, "recipient", nil, "another age recipient that may decrypt the file (repeatable)")
	_ = cmd.MarkFlagRequired("file")
	return cmd
}

func runSeal(ctx context.Context, g *globals, o *sealOptions) error {
	if o.out != "" {
		same, err := samePath(o.file, o.out)
		if err != nil {
			return err
		}
		if same {
			return fmt.Errorf("-o %s: would overwrite the plaintext input; write the encrypted file elsewhere", o.out)
		}
	}
	plain, err := os.ReadFile(o.file)
	if err != nil {
		return fmt.Errorf("read -f %s: %w", o.file, err)
	}
	if _, err := quadlet.ParseSecretFile(filepath.Base(o.file), plain); err != nil {
		return err
	}
	cluster := o.clusterRecipient
	if cluster == "" {
		c, err := g.client()
		if err != nil {
			return fmt.Errorf("%w (or give --cluster-recipient)", err)
		}
		r, err := c.SecretsRecipient(ctx)
		if err != nil {
			return fmt.Errorf("ask the cluster's recipient: %w", err)
		}
		cluster = r.Recipient
	}
	recipients, err := parseRecipients(append([]string{cluster}, o.recipients...))
	if err != nil {
		return err
	}
	enc, err := sops.Encrypt(plain, recipients, sops.DefaultRules, time.Now())
	if err != nil {
		return fmt.Errorf("encrypt %s: %w", o.file, err)
	}
	if o.out == "" {
		_, err := g.stdout.Write(enc)
		return err
	}
	if err := os.WriteFile(o.out, enc, 0o644); err != nil {
		return fmt.Errorf("write -o %s: %w", o.out, err)
	}
	fmt.Fprintf(g.stderr, "wrote %s, encrypted to %d recipient(s); commit it outside workload directories and delete the plaintext\n", o.out, len(recipients))
	return nil
}

func parseRecipients(rs []string) ([]*agelib.X25519Recipient, error) {
	out := make([]*agelib.X25519Recipient, 0, len(rs))
	for _, s := range rs {
		r, err := agelib.ParseX25519Recipient(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("recipient %q: %w", s, err)
		}
		out = append(out, r)
	}
	return out, nil
}

// samePath reports whether two paths name the same file (a missing b is
// not the same).
func samePath(a, b string) (bool, error) {
	sa, err := os.Stat(a)
	if err != nil {
		return false, fmt.Errorf("read -f %s: %w", a, err)
	}
	sb, err := os.Stat(b)
	if errors.Is(err, os.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("-o %s: %w", b, err)
	}
	return os.SameFile(sa, sb), nil
}

func runGetSecrets(ctx context.Context, c *apiclient.Client, g *globals, name, ns string, f outputFormat, now time.Time) error {
	ss, err := c.ListSecrets(ctx, ns)
	if err != nil {
		return err
	}
	if name != "" {
		ss = filter(ss, func(s api.SecretInfo) bool { return s.Name == name })
		if len(ss) == 0 {
			return fmt.Errorf("secret %q not found", name)
		}
	}
	if f != formatTable {
		return printData(g.stdout, f, ss)
	}
	t := newTable(g.stdout, "NAMESPACE", "NAME", "KEYS", "VERSION", "OWNER", "AGE")
	for _, s := range ss {
		owner := s.Owner.Kind
		if s.Owner.Kind == api.OwnerGit {
			owner = "git:" + s.Owner.Source + "/" + s.Owner.Path
		}
		t.row(s.Namespace, s.Name, strings.Join(s.Keys, ","), fmt.Sprint(s.Version), owner, age(now, s.CreatedAt))
	}
	return t.flush()
}
