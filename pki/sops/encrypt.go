package sops

import (
	"bytes"
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"strings"
	"time"

	"filippo.io/age"
	"filippo.io/age/armor"
	"go.yaml.in/yaml/v3"
)

// sopsVersion is the sops version KAT's files claim: the oldest whose
// format they follow.
const sopsVersion = "3.9.0"

// Encrypt encrypts a plaintext YAML mapping to recipients in the SOPS
// format, the values chosen by rules. Only strings may be encrypted (sops
// would store numbers and booleans in its own spelling). Its errors name the
// field and line, never a value.
func Encrypt(plain []byte, recipients []*age.X25519Recipient, rules Rules, now time.Time) ([]byte, error) {
	if len(recipients) == 0 {
		return nil, errors.New("encrypt: no recipient")
	}
	var doc yaml.Node
	if err := yaml.Unmarshal(plain, &doc); err != nil {
		return nil, fmt.Errorf("invalid YAML: %w", err)
	}
	if len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, errors.New("the file must be a YAML mapping")
	}
	top := doc.Content[0]
	for i := 0; i+1 < len(top.Content); i += 2 {
		if top.Content[i].Value == "sops" {
			return nil, errors.New("the file is already encrypted (it has a sops key)")
		}
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		return nil, fmt.Errorf("encrypt: data key: %w", err)
	}
	h, err := walkValues(top, rules, func(n *yaml.Node, path []string, where string, h hash.Hash) error {
		if n.ShortTag() != "!!str" {
			return fmt.Errorf("%s: must be a string: quote it", where)
		}
		h.Write([]byte(n.Value))
		if n.Value == "" {
			return nil
		}
		s, err := gcmSeal(key, []byte(n.Value), additionalData(path))
		if err != nil {
			return err
		}
		n.Value, n.Style, n.Tag = s, 0, "!!str"
		return nil
	})
	if err != nil {
		return nil, err
	}
	lm := now.UTC().Format(time.RFC3339)
	mac, err := gcmSeal(key, []byte(strings.ToUpper(hex.EncodeToString(h.Sum(nil)))), lm)
	if err != nil {
		return nil, err
	}
	meta, err := metadataNode(key, recipients, rules, lm, mac)
	if err != nil {
		return nil, err
	}
	top.Content = append(top.Content, scalarNode("sops"), meta)
	var out bytes.Buffer
	e := yaml.NewEncoder(&out)
	e.SetIndent(4)
	if err := e.Encode(&doc); err != nil {
		return nil, fmt.Errorf("encrypt: write YAML: %w", err)
	}
	if err := e.Close(); err != nil {
		return nil, fmt.Errorf("encrypt: write YAML: %w", err)
	}
	return out.Bytes(), nil
}

func scalarNode(s string) *yaml.Node { return &yaml.Node{Kind: yaml.ScalarNode, Value: s} }

// metadataNode is the sops block: the data key wrapped for each recipient,
// lastmodified double-quoted (sops refuses a YAML timestamp), the MAC and
// the rule.
func metadataNode(key []byte, recipients []*age.X25519Recipient, rules Rules, lastModified, mac string) (*yaml.Node, error) {
	meta := &yaml.Node{Kind: yaml.MappingNode}
	add := func(k string, v *yaml.Node) { meta.Content = append(meta.Content, scalarNode(k), v) }
	stanzas := &yaml.Node{Kind: yaml.SequenceNode}
	for _, r := range recipients {
		var b bytes.Buffer
		aw := armor.NewWriter(&b)
		w, err := age.Encrypt(aw, r)
		if err != nil {
			return nil, fmt.Errorf("encrypt the data key: %w", err)
		}
		if _, err := w.Write(key); err != nil {
			return nil, fmt.Errorf("encrypt the data key: %w", err)
		}
		if err := w.Close(); err != nil {
			return nil, fmt.Errorf("encrypt the data key: %w", err)
		}
		if err := aw.Close(); err != nil {
			return nil, fmt.Errorf("encrypt the data key: %w", err)
		}
		stanzas.Content = append(stanzas.Content, &yaml.Node{Kind: yaml.MappingNode, Content: []*yaml.Node{
			scalarNode("recipient"), scalarNode(r.String()),
			scalarNode("enc"), {Kind: yaml.ScalarNode, Value: b.String(), Style: yaml.LiteralStyle},
		}})
	}
	add("age", stanzas)
	add("lastmodified", &yaml.Node{Kind: yaml.ScalarNode, Value: lastModified, Style: yaml.DoubleQuotedStyle})
	add("mac", scalarNode(mac))
	for _, r := range []struct{ k, v string }{
		{"unencrypted_suffix", rules.UnencryptedSuffix}, {"encrypted_suffix", rules.EncryptedSuffix},
		{"unencrypted_regex", rules.UnencryptedRegex}, {"encrypted_regex", rules.EncryptedRegex},
	} {
		if r.v != "" {
			add(r.k, scalarNode(r.v))
		}
	}
	if rules.MACOnlyEncrypted {
		add("mac_only_encrypted", &yaml.Node{Kind: yaml.ScalarNode, Tag: "!!bool", Value: "true"})
	}
	add("version", scalarNode(sopsVersion))
	return meta, nil
}

func gcmSeal(key, plain []byte, aad string) (string, error) {
	block, err := aes.NewCipher(key)
	if err != nil {
		return "", fmt.Errorf("encrypt value: %w", err)
	}
	g, err := cipher.NewGCMWithNonceSize(block, 32)
	if err != nil {
		return "", fmt.Errorf("encrypt value: %w", err)
	}
	iv := make([]byte, 32)
	if _, err := rand.Read(iv); err != nil {
		return "", fmt.Errorf("encrypt value: %w", err)
	}
	out := g.Seal(nil, iv, plain, []byte(aad))
	n := len(out) - g.Overhead()
	enc := base64.StdEncoding.EncodeToString
	return fmt.Sprintf("ENC[AES256_GCM,data:%s,iv:%s,tag:%s,type:str]", enc(out[:n]), enc(iv), enc(out[n:])), nil
}
