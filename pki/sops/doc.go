// Package sops reads and writes the SOPS file format (YAML, values encrypted
// with AES-256-GCM under a data key wrapped for age X25519 recipients), the
// subset KAT needs for secrets kept in Git: files made by the sops tool with
// age recipients decrypt here, and files written here decrypt with sops.
//
// Other master keys (pgp, kms, ...) may wrap the same data key and are
// ignored; key groups (Shamir) and comment rules are refused with a message
// naming the field. Errors never hold a value.
//
//	doc, err := sops.Decrypt(file, identity)   // doc.Tree: the plaintext tree, lines of file
//	out, err := sops.Encrypt(plain, []*age.X25519Recipient{r}, sops.DefaultRules, time.Now())
package sops
