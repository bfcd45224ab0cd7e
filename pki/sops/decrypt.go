package sops

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/hmac"
	"crypto/sha512"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"regexp"
	"strconv"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"go.yaml.in/yaml/v3"
)

// ErrNotEncrypted is returned for a document without a sops block.
var ErrNotEncrypted = errors.New("the file has no sops metadata: it is not encrypted (if it was ever pushed so, its values are in the Git history: change them)")

// NoIdentityError is returned when no age stanza of a file opens with the
// identities given: the file is encrypted to other recipients.
type NoIdentityError struct {
	// Recipients are the file's age recipients.
	Recipients []string
}

func (e *NoIdentityError) Error() string {
	return "not encrypted to this cluster: its age recipients are " + strings.Join(e.Recipients, ", ")
}

// Document is a decrypted file.
type Document struct {
	// Tree is the file's top-level mapping without the sops key, each
	// encrypted value replaced by its plaintext (tag !!str for sops type
	// str), comments dropped; lines are those of the encrypted file.
	Tree *yaml.Node
	// Meta is the file's sops block.
	Meta *Metadata
	// Recipient is the age recipient whose stanza opened the data key.
	Recipient string
}

// encValueRE matches one sops-encrypted value.
var encValueRE = regexp.MustCompile(`^ENC\[AES256_GCM,data:([A-Za-z0-9+/=]*),iv:([A-Za-z0-9+/=]+),tag:([A-Za-z0-9+/=]+),type:(str|int|float|bool|bytes|time|comment)\]$`)

// Decrypt opens a SOPS YAML file encrypted to one of ids and checks its MAC.
// Its errors name the field and line, never a value.
func Decrypt(data []byte, ids ...age.Identity) (*Document, error) {
	top, meta, err := split(data)
	if err != nil {
		return nil, err
	}
	key, recipient, err := dataKey(meta, ids)
	if err != nil {
		return nil, err
	}
	h, err := walkValues(top, meta.Rules, func(n *yaml.Node, path []string, where string, h hash.Hash) error {
		if n.Value == "" { // sops leaves empty strings as they are
			return nil
		}
		plain, typ, err := gcmOpen(key, n.Value, additionalData(path))
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		if typ == "comment" {
			return fmt.Errorf("%s: holds an encrypted comment where a value belongs", where)
		}
		h.Write(plain)
		n.Value, n.Style = string(plain), 0
		n.Tag = "!!str"
		if typ != "str" && typ != "bytes" {
			n.Tag = "!!" + typ // refused by the Secret parser: values must be strings
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	lm, err := time.Parse(time.RFC3339, meta.LastModified)
	if err != nil {
		return nil, fmt.Errorf("sops.lastmodified: must be an RFC 3339 time: %w", err)
	}
	want, _, err := gcmOpen(key, meta.MAC, lm.Format(time.RFC3339))
	if err != nil {
		return nil, fmt.Errorf("sops.mac: %w", err)
	}
	if !hmac.Equal(want, []byte(strings.ToUpper(hex.EncodeToString(h.Sum(nil))))) {
		return nil, errors.New("sops.mac: does not match the values: the file was changed after it was encrypted")
	}
	return &Document{Tree: top, Meta: meta, Recipient: recipient}, nil
}

// Recipients returns the age recipients a SOPS file is encrypted to,
// without decrypting it.
func Recipients(data []byte) ([]string, error) {
	_, meta, err := split(data)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(meta.Age))
	for i, s := range meta.Age {
		out[i] = s.Recipient
	}
	return out, nil
}

// split parses data as one YAML mapping and separates the sops block from
// the tree.
func split(data []byte) (*yaml.Node, *Metadata, error) {
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var doc yaml.Node
	if err := dec.Decode(&doc); err != nil {
		return nil, nil, fmt.Errorf("invalid YAML: %w", err)
	}
	var extra yaml.Node
	if err := dec.Decode(&extra); !errors.Is(err, io.EOF) {
		return nil, nil, errors.New("the file holds more than one YAML document")
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, nil, errors.New("the file must be a YAML mapping")
	}
	top := doc.Content[0]
	var meta *Metadata
	body := make([]*yaml.Node, 0, len(top.Content))
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value != "sops" {
			body = append(body, top.Content[i], top.Content[i+1])
			continue
		}
		var err error
		if meta, err = parseMetadata(top.Content[i+1]); err != nil {
			return nil, nil, err
		}
	}
	if meta == nil {
		return nil, nil, ErrNotEncrypted
	}
	top.Content = body
	return top, meta, nil
}

// walkValues walks the values of a tree as sops does for its MAC: the
// unencrypted ones (per rules) enter the returned hash here, each encrypted
// one is handed to enc, which must hash its plaintext.
func walkValues(top *yaml.Node, rules Rules, enc func(n *yaml.Node, path []string, where string, h hash.Hash) error) (hash.Hash, error) {
	m, err := rules.matcher()
	if err != nil {
		return nil, err
	}
	h := sha512.New()
	if rules.MACOnlyEncrypted {
		h.Write(macOnlyEncryptedInit)
	}
	err = walk(top, nil, func(n *yaml.Node, path []string) error {
		where := fmt.Sprintf("line %d: %s", n.Line, strings.Join(path, "."))
		if m.encrypted(path) {
			return enc(n, path, where, h)
		}
		if rules.MACOnlyEncrypted {
			return nil
		}
		b, err := macBytes(n)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		h.Write(b)
		return nil
	})
	return h, err
}

// walk calls leaf for every scalar that is not null below n, in document
// order, with the path of map keys leading to it (items of a list keep
// their parent's path), dropping comments on the way.
func walk(n *yaml.Node, path []string, leaf func(n *yaml.Node, path []string) error) error {
	n.HeadComment, n.LineComment, n.FootComment = "", "", ""
	switch n.Kind {
	case yaml.MappingNode:
		for i := 0; i+1 < len(n.Content); i += 2 {
			k := n.Content[i]
			k.HeadComment, k.LineComment, k.FootComment = "", "", ""
			if k.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: %s: keys must be strings", k.Line, strings.Join(path, "."))
			}
			if err := walk(n.Content[i+1], append(path[:len(path):len(path)], k.Value), leaf); err != nil {
				return err
			}
		}
	case yaml.SequenceNode:
		for _, it := range n.Content {
			if err := walk(it, path, leaf); err != nil {
				return err
			}
		}
	case yaml.AliasNode:
		return fmt.Errorf("line %d: %s: aliases are not supported in an encrypted file", n.Line, strings.Join(path, "."))
	case yaml.ScalarNode:
		if n.ShortTag() == "!!null" {
			return nil
		}
		return leaf(n, path)
	}
	return nil
}

// additionalData is the GCM additional data of the value at path: the keys
// joined with ":" and a trailing ":".
func additionalData(path []string) string { return strings.Join(path, ":") + ":" }

func dataKey(m *Metadata, ids []age.Identity) ([]byte, string, error) {
	recipients := make([]string, 0, len(m.Age))
	for _, s := range m.Age {
		recipients = append(recipients, s.Recipient)
		r, err := age.Decrypt(armor.NewReader(strings.NewReader(s.Enc)), ids...)
		if err != nil {
			var nm *age.NoIdentityMatchError
			if errors.As(err, &nm) {
				continue
			}
			return nil, "", fmt.Errorf("sops.age (%s): %w", s.Recipient, err)
		}
		key, err := io.ReadAll(io.LimitReader(r, 64))
		if err != nil {
			return nil, "", fmt.Errorf("sops.age (%s): %w", s.Recipient, err)
		}
		if len(key) != 32 {
			return nil, "", fmt.Errorf("sops.age (%s): the data key is %d bytes, want 32", s.Recipient, len(key))
		}
		return key, s.Recipient, nil
	}
	return nil, "", &NoIdentityError{Recipients: recipients}
}

func gcmOpen(key []byte, value, aad string) (plain []byte, typ string, err error) {
	mm := encValueRE.FindStringSubmatch(value)
	if mm == nil {
		return nil, "", errors.New("is not encrypted (want ENC[AES256_GCM,...])")
	}
	data, err1 := base64.StdEncoding.DecodeString(mm[1])
	iv, err2 := base64.StdEncoding.DecodeString(mm[2])
	tag, err3 := base64.StdEncoding.DecodeString(mm[3])
	if errors.Join(err1, err2, err3) != nil || len(tag) != 16 || len(iv) == 0 {
		return nil, "", errors.New("has a malformed ENC[...] value")
	}
	block, err := aes.NewCipher(key)
	if err != nil {
		return nil, "", fmt.Errorf("open value: %w", err)
	}
	g, err := cipher.NewGCMWithNonceSize(block, len(iv))
	if err != nil {
		return nil, "", fmt.Errorf("open value: %w", err)
	}
	out, err := g.Open(nil, iv, append(data, tag...), []byte(aad))
	if err != nil {
		return nil, "", errors.New("does not decrypt: changed, moved from another key, or encrypted with another data key")
	}
	return out, mm[4], nil
}

// macBytes is what sops hashes for an unencrypted scalar: its value as sops'
// YAML store types it.
func macBytes(n *yaml.Node) ([]byte, error) {
	switch n.ShortTag() {
	case "!!str":
		return []byte(n.Value), nil
	case "!!int":
		var i int
		if err := n.Decode(&i); err != nil {
			return nil, errors.New("an integer out of range")
		}
		return []byte(strconv.Itoa(i)), nil
	case "!!float":
		var f float64
		if err := n.Decode(&f); err != nil {
			return nil, errors.New("a malformed number")
		}
		return []byte(strconv.FormatFloat(f, 'f', -1, 64)), nil
	case "!!bool":
		var b bool
		if err := n.Decode(&b); err != nil {
			return nil, errors.New("a malformed boolean")
		}
		if b {
			return []byte("True"), nil
		}
		return []byte("False"), nil
	}
	return nil, fmt.Errorf("values of type %s are not supported", n.ShortTag())
}
