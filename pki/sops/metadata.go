package sops

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Rules say which values of a file are encrypted, as sops' creation rules
// do: at most one of the four may be set, and MACOnlyEncrypted leaves the
// unencrypted values out of the MAC.
type Rules struct {
	UnencryptedSuffix string
	EncryptedSuffix   string
	UnencryptedRegex  string
	EncryptedRegex    string
	MACOnlyEncrypted  bool
}

// DefaultRules encrypt the values under data and stringData only, so that
// kind, metadata and key names stay readable and reviewable in Git: the rule
// Flux documents for Kubernetes Secrets.
var DefaultRules = Rules{EncryptedRegex: "^(data|stringData)$"}

// macOnlyEncryptedInit is what sops hashes first when mac_only_encrypted is
// set.
var macOnlyEncryptedInit = []byte{0x8a, 0x3f, 0xd2, 0xad, 0x54, 0xce, 0x66, 0x52, 0x7b, 0x10, 0x34, 0xf3, 0xd1,
	0x47, 0xbe, 0x0b, 0x0b, 0x97, 0x5b, 0x3b, 0xf4, 0x4f, 0x72, 0xc6, 0xfd, 0xad, 0xec, 0x81, 0x76, 0xf2, 0x7d, 0x69}

// matcher decides, from the path of map keys leading to a value, whether
// the value is encrypted: sops' shouldBeEncrypted, each rule matched against
// every element of the path.
type matcher struct {
	r              Rules
	unencRE, encRE *regexp.Regexp
}

func (r Rules) matcher() (*matcher, error) {
	m := &matcher{r: r}
	set := 0
	for _, s := range []string{r.UnencryptedSuffix, r.EncryptedSuffix, r.UnencryptedRegex, r.EncryptedRegex} {
		if s != "" {
			set++
		}
	}
	if set > 1 {
		return nil, errors.New("sops: only one of unencrypted_suffix, encrypted_suffix, unencrypted_regex and encrypted_regex may be set")
	}
	var err error
	if r.UnencryptedRegex != "" {
		if m.unencRE, err = regexp.Compile(r.UnencryptedRegex); err != nil {
			return nil, fmt.Errorf("sops.unencrypted_regex: %w", err)
		}
	}
	if r.EncryptedRegex != "" {
		if m.encRE, err = regexp.Compile(r.EncryptedRegex); err != nil {
			return nil, fmt.Errorf("sops.encrypted_regex: %w", err)
		}
	}
	return m, nil
}

func anyOf(path []string, f func(string) bool) bool {
	for _, p := range path {
		if f(p) {
			return true
		}
	}
	return false
}

func (m *matcher) encrypted(path []string) bool {
	switch {
	case m.r.UnencryptedSuffix != "":
		return !anyOf(path, func(p string) bool { return strings.HasSuffix(p, m.r.UnencryptedSuffix) })
	case m.r.EncryptedSuffix != "":
		return anyOf(path, func(p string) bool { return strings.HasSuffix(p, m.r.EncryptedSuffix) })
	case m.unencRE != nil:
		return !anyOf(path, m.unencRE.MatchString)
	case m.encRE != nil:
		return anyOf(path, m.encRE.MatchString)
	}
	return true
}

// Metadata is a file's sops block, the age part of it.
type Metadata struct {
	// Age holds one data key wrapped for each age recipient.
	Age []AgeStanza
	// LastModified is the time of the last encryption, RFC 3339; it is the
	// additional data of the encrypted MAC.
	LastModified string
	// MAC is the encrypted MAC of the values.
	MAC string
	// Version is the sops version that wrote the file; not checked.
	Version string
	Rules   Rules
}

// AgeStanza is the data key encrypted to one age recipient, as an armored
// age file.
type AgeStanza struct {
	Recipient string
	Enc       string
}

func parseMetadata(n *yaml.Node) (*Metadata, error) {
	if n.Kind != yaml.MappingNode {
		return nil, errors.New("sops: must be a mapping")
	}
	m := &Metadata{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i].Value, n.Content[i+1]
		str := func(dst *string) error {
			if v.Kind != yaml.ScalarNode {
				return fmt.Errorf("sops.%s: must be a string", k)
			}
			*dst = v.Value
			return nil
		}
		var err error
		switch k {
		case "age":
			m.Age, err = parseAge(v)
		case "lastmodified":
			err = str(&m.LastModified)
		case "mac":
			err = str(&m.MAC)
		case "version":
			err = str(&m.Version)
		case "unencrypted_suffix":
			err = str(&m.Rules.UnencryptedSuffix)
		case "encrypted_suffix":
			err = str(&m.Rules.EncryptedSuffix)
		case "unencrypted_regex":
			err = str(&m.Rules.UnencryptedRegex)
		case "encrypted_regex":
			err = str(&m.Rules.EncryptedRegex)
		case "mac_only_encrypted":
			m.Rules.MACOnlyEncrypted = v.Kind == yaml.ScalarNode && strings.EqualFold(v.Value, "true")
		case "kms", "gcp_kms", "azure_kv", "hc_vault", "pgp", "hckms":
			// Other keys wrapping the same data key: the age stanza is enough.
		case "key_groups", "shamir_threshold":
			return nil, fmt.Errorf("sops.%s: key groups (Shamir secret sharing) are not supported: encrypt to age recipients in one group", k)
		case "unencrypted_comment_regex", "encrypted_comment_regex":
			return nil, fmt.Errorf("sops.%s: not supported: choose encrypted values by key (encrypted_regex)", k)
		default:
			return nil, fmt.Errorf("sops.%s: unknown metadata field", k)
		}
		if err != nil {
			return nil, err
		}
	}
	switch {
	case len(m.Age) == 0:
		return nil, errors.New("sops.age: the file is encrypted to no age recipient")
	case m.MAC == "":
		return nil, errors.New("sops.mac: required")
	case m.LastModified == "":
		return nil, errors.New("sops.lastmodified: required")
	}
	return m, nil
}

func parseAge(v *yaml.Node) ([]AgeStanza, error) {
	if v.Kind != yaml.SequenceNode {
		return nil, errors.New("sops.age: must be a list")
	}
	out := make([]AgeStanza, 0, len(v.Content))
	for j, it := range v.Content {
		if it.Kind != yaml.MappingNode {
			return nil, fmt.Errorf("sops.age[%d]: must be a mapping", j)
		}
		var s AgeStanza
		for x := 0; x+1 < len(it.Content); x += 2 {
			switch it.Content[x].Value {
			case "recipient":
				s.Recipient = it.Content[x+1].Value
			case "enc":
				s.Enc = it.Content[x+1].Value
			}
		}
		if s.Enc == "" {
			return nil, fmt.Errorf("sops.age[%d].enc: required", j)
		}
		out = append(out, s)
	}
	return out, nil
}
