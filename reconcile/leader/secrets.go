package leader

import (
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
