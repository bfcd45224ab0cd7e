package main

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	agelib "filippo.io/age"
	"github.com/spf13/cobra"
	"go.yaml.in/yaml/v3"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
	"kat.dws.rip/kat/pki/sops"
	"kat.dws.rip/kat/quadlet"
)

func newSecretCommand(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "secret recipient|seal|set|delete",
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
	}, newSecretSealCommand(g), newSecretSetCommand(g), &cobra.Command{
		Use:   "delete NS/NAME",
		Short: "Delete a secret set with katcall secret set (a secret from Git: delete its file)",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			ns, name, err := splitSecretName(args[0])
			if err != nil {
				return err
			}
			c, err := g.client()
			if err != nil {
				return err
			}
			if err := c.DeleteSecret(cmd.Context(), ns, name); err != nil {
				return err
			}
			fmt.Fprintf(g.stdout, "secret %s/%s deleted\n", ns, name)
			return nil
		},
	})
	return cmd
}

type setOptions struct {
	literals, files []string
	file            string
}

func newSecretSetCommand(g *globals) *cobra.Command {
	o := &setOptions{}
	cmd := &cobra.Command{
		Use:   "set NS/NAME [--from-literal KEY=VALUE]... [--from-file KEY=PATH]... | -f SECRET.yaml",
		Short: "Create or replace a secret outside Git, encrypted here to the cluster",
		Long: `set builds a Secret from literals (visible in your shell's history) and files, or
reads a plaintext Secret file, checks it, encrypts it on this machine to the cluster's
recipient and sends the encrypted file: the plaintext never travels. A secret managed
by a Git source cannot be set (change its file instead). Values cannot be read back.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error { return runSecretSet(cmd.Context(), g, args[0], o) },
	}
	cmd.Flags().StringArrayVar(&o.literals, "from-literal", nil, "KEY=VALUE, a text value (repeatable)")
	cmd.Flags().StringArrayVar(&o.files, "from-file", nil, "KEY=PATH, a value read from a file (repeatable)")
	cmd.Flags().StringVarP(&o.file, "file", "f", "", "a plaintext Secret file instead of --from-literal and --from-file")
	return cmd
}

func splitSecretName(s string) (ns, name string, err error) {
	ns, name, ok := strings.Cut(s, "/")
	if !ok || ns == "" || name == "" {
		return "", "", fmt.Errorf("secret %q: want NS/NAME", s)
	}
	return ns, name, nil
}

func runSecretSet(ctx context.Context, g *globals, arg string, o *setOptions) error {
	ns, name, err := splitSecretName(arg)
	if err != nil {
		return err
	}
	plain, err := o.plaintext(ns, name)
	if err != nil {
		return err
	}
	if _, err := quadlet.ParseSecretFile(name+".yaml", plain); err != nil {
		return err
	}
	c, err := g.client()
	if err != nil {
		return err
	}
	r, err := c.SecretsRecipient(ctx)
	if err != nil {
		return fmt.Errorf("ask the cluster's recipient: %w", err)
	}
	recipients, err := parseRecipients([]string{r.Recipient})
	if err != nil {
		return err
	}
	enc, err := sops.Encrypt(plain, recipients, sops.DefaultRules, time.Now())
	if err != nil {
		return fmt.Errorf("encrypt secret %s/%s: %w", ns, name, err)
	}
	info, err := c.PutSecret(ctx, ns, name, enc)
	if err != nil {
		return err
	}
	fmt.Fprintf(g.stdout, "secret %s/%s version %d (keys %s)\n", info.Namespace, info.Name, info.Version, strings.Join(info.Keys, ", "))
	return nil
}

// plaintext is the Secret file set sends, encrypted: -f's, or one built
// from the literals (stringData) and files (data).
func (o *setOptions) plaintext(ns, name string) ([]byte, error) {
	if o.file != "" {
		if len(o.literals)+len(o.files) > 0 {
			return nil, errors.New("-f: not with --from-literal or --from-file")
		}
		b, err := os.ReadFile(o.file)
		if err != nil {
			return nil, fmt.Errorf("read -f %s: %w", o.file, err)
		}
		return b, nil
	}
	if len(o.literals)+len(o.files) == 0 {
		return nil, errors.New("give --from-literal, --from-file or -f")
	}
	doc := map[string]any{"apiVersion": quadlet.APIVersion, "kind": quadlet.KindSecret,
		"metadata": map[string]string{"name": name, "namespace": ns}}
	text, data := map[string]string{}, map[string]string{}
	for _, l := range o.literals {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			return nil, fmt.Errorf("--from-literal %q: want KEY=VALUE", k)
		}
		text[k] = v
	}
	for _, f := range o.files {
		k, path, ok := strings.Cut(f, "=")
		if !ok {
			return nil, fmt.Errorf("--from-file %q: want KEY=PATH", f)
		}
		b, err := os.ReadFile(path)
		if err != nil {
			return nil, fmt.Errorf("--from-file %s: %w", k, err)
		}
		data[k] = base64.StdEncoding.EncodeToString(b)
	}
	if len(text) > 0 {
		doc["stringData"] = text
	}
	if len(data) > 0 {
		doc["data"] = data
	}
	b, err := yaml.Marshal(doc)
	if err != nil {
		return nil, fmt.Errorf("build the secret: %w", err)
	}
	return b, nil
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
	cols := []string{"NAMESPACE", "NAME", "KEYS", "VERSION", "OWNER", "USED-BY", "AGE"}
	withErr := slices.ContainsFunc(ss, func(s api.SecretInfo) bool { return s.Error != "" })
	if withErr {
		cols = append(cols, "ERROR")
	}
	t := newTable(g.stdout, cols...)
	for _, s := range ss {
		owner := s.Owner.Kind
		if s.Owner.Kind == api.OwnerGit {
			owner = "git:" + s.Owner.Source + "/" + s.Owner.Path
		}
		row := []string{s.Namespace, s.Name, strings.Join(s.Keys, ","), fmt.Sprint(s.Version), owner, cmp.Or(strings.Join(s.UsedBy, ","), "<none>"),
			age(now, s.CreatedAt)}
		if withErr {
			row = append(row, cmp.Or(s.Error, "-"))
		}
		t.row(row...)
	}
	return t.flush()
}
