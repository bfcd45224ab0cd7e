package quadlet

import (
	"bytes"
	"encoding/base64"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"go.yaml.in/yaml/v3"
)

// KindSecret is the kind of a secret file.
const KindSecret = "Secret"

// Limits of one Secret.
const (
	// MaxSecretKeys is the most keys of a Secret, stringData and data
	// together.
	MaxSecretKeys = 64
	// MaxSecretBytes is the most bytes of a Secret's values together,
	// decoded.
	MaxSecretBytes = 256 << 10
	// MaxSecretFileBytes is the largest encrypted secret file (or API body):
	// MaxSecretBytes base64-encoded by sops plus per-key and per-recipient
	// overhead.
	MaxSecretFileBytes = 512 << 10
	// maxSecretKeyLen bounds a key name.
	maxSecretKeyLen = 253
)

// SecretSuffixes are the file name endings of secret files in a config
// repository.
var SecretSuffixes = []string{".sops.yaml", ".sops.yml"}

// IsSecretFile reports whether a file name is a secret file's.
func IsSecretFile(name string) bool {
	return !strings.HasPrefix(name, ".") && slices.ContainsFunc(SecretSuffixes, func(s string) bool {
		return strings.HasSuffix(name, s) && len(name) > len(s)
	})
}

// Secret is a decrypted secret: its name and values. Values print as
// "[redacted]".
type Secret struct {
	Metadata ObjectMeta
	// Values are stringData and data merged, data decoded from base64.
	Values map[string]SecretValue
}

// Namespace is the secret's namespace.
func (s *Secret) Namespace() string { return s.Metadata.Namespace }

// Name is the secret's name.
func (s *Secret) Name() string { return s.Metadata.Name }

// Keys returns the secret's keys, sorted.
func (s *Secret) Keys() []string { return slices.Sorted(maps.Keys(s.Values)) }

// BinaryKeys returns the keys, sorted, whose value is not text (not UTF-8,
// or holding a NUL byte): they can be mounted as files but not set as
// environment variables.
func (s *Secret) BinaryKeys() []string {
	var out []string
	for _, k := range s.Keys() {
		if b := s.Values[k].Reveal(); !utf8.Valid(b) || bytes.IndexByte(b, 0) >= 0 {
			out = append(out, k)
		}
	}
	return out
}

// secretKeyRE is what a key may hold: it becomes a file name.
var secretKeyRE = regexp.MustCompile(`^[-._a-zA-Z0-9]+$`)

// SecretKeyProblem says what is wrong with a secret's key name, or "".
func SecretKeyProblem(k string) string {
	switch {
	case k == "":
		return "key must not be empty"
	case len(k) > maxSecretKeyLen:
		return fmt.Sprintf("key must be at most %d characters", maxSecretKeyLen)
	case !secretKeyRE.MatchString(k):
		return "key must be letters, digits, '-', '_' and '.'"
	case k == "." || strings.HasPrefix(k, ".."):
		return "key must not be '.' or start with '..' (reserved for the files' layout)"
	}
	return ""
}

// rawNode keeps a field's YAML node for the Secret parser, which reads
// values itself so that no error quotes one.
type rawNode struct{ n *yaml.Node }

func (r *rawNode) decodeNode(n *yaml.Node) (string, bool) {
	r.n = n
	return "", true
}

// SecretDocument is the shape of a plaintext Secret file, for its
// documentation; ParseSecret reads the file itself so that no error quotes
// a value.
type SecretDocument struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindSecret.
	Kind string `json:"kind" yaml:"kind"`
	// Metadata names the Secret; the namespace defaults to "default".
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
	// StringData are text values, taken exactly as written.
	StringData map[string]string `json:"stringData,omitempty" yaml:"stringData,omitempty"`
	// Data are binary values, base64 (standard alphabet, padded).
	Data map[string]string `json:"data,omitempty" yaml:"data,omitempty"`
}

// secretDoc is SecretDocument as the parser decodes it.
type secretDoc struct {
	APIVersion string     `yaml:"apiVersion"`
	Kind       string     `yaml:"kind"`
	Metadata   ObjectMeta `yaml:"metadata"`
	StringData rawNode    `yaml:"stringData"`
	Data       rawNode    `yaml:"data"`
}

// ParseSecretFile parses and validates a plaintext Secret file. On failure
// the error is an ErrorList; no message holds a value.
func ParseSecretFile(file string, data []byte) (*Secret, error) {
	if len(data) > MaxSecretFileBytes {
		return nil, ErrorList{{File: file, Message: fmt.Sprintf("%d bytes, more than the limit of %d", len(data), MaxSecretFileBytes)}}
	}
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil {
		line, msg := splitYAMLError(err)
		return nil, ErrorList{{File: file, Line: line, Message: "invalid YAML: " + msg}}
	}
	if len(root.Content) != 1 {
		return nil, ErrorList{{File: file, Message: "file is empty"}}
	}
	return ParseSecret(file, root.Content[0])
}

// ParseSecret validates a Secret from its YAML tree, such as the decrypted
// tree of a SOPS file (lines are then the encrypted file's). A missing
// namespace becomes DefaultNamespace. On failure the error is an ErrorList;
// no message holds a value.
func ParseSecret(file string, top *yaml.Node) (*Secret, error) {
	if top.Kind != yaml.MappingNode {
		return nil, ErrorList{{File: file, Line: top.Line, Message: "must be a YAML mapping with apiVersion, kind and stringData or data, got " + describeType(top)}}
	}
	doc := newDocument(file, top)
	var errs ErrorList
	c := doc.checker(&errs)
	c.checkHeader(KindSecret)
	if doc.kind != KindSecret {
		return nil, errs.err() // another kind: its fields mean nothing here
	}
	var sd secretDoc
	doc.decode(&sd)
	errs = append(errs, doc.errs...)
	s := &Secret{Metadata: sd.Metadata, Values: map[string]SecretValue{}}
	if c.required("metadata") {
		validateMeta(c, s.Metadata)
		if s.Metadata.Namespace == "" {
			s.Metadata.Namespace = DefaultNamespace
		}
		c.check("metadata.namespace", s.Metadata.Namespace, dnsLabel)
	}
	total := 0
	for _, part := range []struct {
		field string
		node  *yaml.Node
	}{{"stringData", sd.StringData.n}, {"data", sd.Data.n}} {
		if part.node == nil {
			continue
		}
		if part.node.Kind != yaml.MappingNode {
			c.errorf(part.field, "must be a mapping of key to string, got %s", describeType(part.node))
			continue
		}
		for i := 0; i+1 < len(part.node.Content); i += 2 {
			k, v := part.node.Content[i], part.node.Content[i+1]
			p := part.field + "[" + strconv.Quote(k.Value) + "]"
			doc.lines[p] = k.Line
			if k.Kind != yaml.ScalarNode {
				c.errorf(part.field, "keys must be strings, got %s", describeType(k))
				continue
			}
			if msg := SecretKeyProblem(k.Value); msg != "" {
				c.errorf(p, "%s", msg)
				continue
			}
			if _, dup := s.Values[k.Value]; dup {
				c.errorf(p, "defined more than once (stringData and data together)")
				continue
			}
			b, ok := secretValue(c, p, part.field == "data", v)
			if !ok {
				continue
			}
			s.Values[k.Value] = NewSecretValue(b)
			total += len(b)
		}
	}
	if len(s.Values) == 0 && !c.failed("stringData") && !c.failed("data") {
		c.errorf("", "has no keys: set stringData or data")
	}
	if len(s.Values) > MaxSecretKeys {
		errs = append(errs, &FieldError{File: file, Message: fmt.Sprintf("%d keys, more than the limit of %d (stringData and data together)", len(s.Values), MaxSecretKeys)})
	}
	if total > MaxSecretBytes {
		errs = append(errs, &FieldError{File: file, Message: fmt.Sprintf("%d bytes of values, more than the limit of %d", total, MaxSecretBytes)})
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return s, nil
}

// secretValue reads one value: a YAML string, base64-decoded for data.
func secretValue(c *checker, path string, base64Data bool, v *yaml.Node) ([]byte, bool) {
	if v.Kind != yaml.ScalarNode || v.ShortTag() != "!!str" {
		c.errorf(path, "must be a string, got %s: quote it in the plaintext before encrypting (sops stores numbers and booleans in its own spelling)", describeType(v))
		return nil, false
	}
	if !base64Data {
		return []byte(v.Value), true
	}
	b, err := base64.StdEncoding.DecodeString(v.Value)
	if err != nil {
		c.errorf(path, "must be base64 (standard alphabet, with padding)")
		return nil, false
	}
	return b, true
}

// describeType names a node's type without its value: what errors about a
// Secret say.
func describeType(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	case yaml.ScalarNode:
		switch n.ShortTag() {
		case "!!null":
			return "nothing"
		case "!!str":
			return "a string"
		case "!!int", "!!float":
			return "a number"
		case "!!bool":
			return "a boolean"
		}
		return "a " + strings.TrimPrefix(n.ShortTag(), "!!")
	}
	return "an unsupported value"
}

// SecretRefs returns the Secret keys the spec sets environment variables
// from, in the order of the variables, and the Secrets it mounts as
// volumes, sorted.
func (s *WorkloadSpec) SecretRefs() (env []SecretKeyRef, volumes []string) {
	for _, e := range s.Container.Env {
		if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil {
			env = append(env, *e.ValueFrom.SecretKeyRef)
		}
	}
	for _, v := range s.Volumes {
		if v.Secret != nil && !slices.Contains(volumes, v.Secret.SecretName) {
			volumes = append(volumes, v.Secret.SecretName)
		}
	}
	slices.Sort(volumes)
	return env, volumes
}

// SecretNames returns the names of every Secret the spec uses, sorted.
func (s *WorkloadSpec) SecretNames() []string {
	env, names := s.SecretRefs()
	for _, r := range env {
		if !slices.Contains(names, r.Name) {
			names = append(names, r.Name)
		}
	}
	slices.Sort(names)
	return names
}
