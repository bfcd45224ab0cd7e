package leader

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"kat.dws.rip/kat/api"
)

// blocked says why w gets no new instance: its resources do not parse, or
// a secret or key it uses is missing. Its running instances stay.
func (p *planner) blocked(w workload) error {
	if w.Spec.RequestErr != nil {
		return w.Spec.RequestErr
	}
	return secretProblem(w, p.in.Secret)
}

// secretProblem names the first secret or key w uses that is missing, or
// a binary key it sets as an environment variable.
func secretProblem(w workload, get func(ns, name string) (api.SecretInfo, bool)) error {
	ns := w.Meta.Namespace
	lookup := func(name string) (api.SecretInfo, error) {
		if get != nil {
			if s, ok := get(ns, name); ok {
				return s, nil
			}
		}
		return api.SecretInfo{}, fmt.Errorf("secret %s/%s does not exist", ns, name)
	}
	for _, ref := range w.Spec.SecretEnv {
		s, err := lookup(ref.Name)
		if err != nil {
			return err
		}
		if !slices.Contains(s.Keys, ref.Key) {
			return fmt.Errorf("secret %s/%s has no key %q (it has: %s)", ns, ref.Name, ref.Key, strings.Join(s.Keys, ", "))
		}
		if slices.Contains(s.BinaryKeys, ref.Key) {
			return fmt.Errorf("key %s of secret %s/%s holds binary data: mount it as a file", ref.Key, ns, ref.Name)
		}
	}
	for _, name := range w.Spec.SecretVolumes {
		if _, err := lookup(name); err != nil {
			return err
		}
	}
	return nil
}

// template is the instance template of w (instanceTemplate) with the
// versions of the secrets it sets environment variables from: a new
// version of one is a new template, rolled out as a new spec is, since a
// running process cannot take a new environment. Secrets used only as
// files are updated in place and do not enter it; a workload without
// secret variables keeps exactly its template of before secrets existed.
// Only uids and versions enter the hash, never a value.
func (p *planner) template(w workload, commit string) string {
	return templateWithSecrets(w, commit, p.in.Secret)
}

func templateWithSecrets(w workload, commit string, get func(ns, name string) (api.SecretInfo, bool)) string {
	base := instanceTemplate(w.Spec.TemplateHash, commit)
	if len(w.Spec.SecretEnv) == 0 || get == nil {
		return base
	}
	var names []string
	for _, ref := range w.Spec.SecretEnv {
		if !slices.Contains(names, ref.Name) {
			names = append(names, ref.Name)
		}
	}
	slices.Sort(names)
	var tag strings.Builder
	for _, name := range names {
		s, ok := get(w.Meta.Namespace, name)
		if !ok {
			continue // nothing is placed without it (blocked)
		}
		fmt.Fprintf(&tag, "%s/%s %s %d\n", w.Meta.Namespace, name, s.UID, s.Version)
	}
	sum := sha256.Sum256([]byte(base + "\x00secrets\x00" + tag.String()))
	return hex.EncodeToString(sum[:])
}
