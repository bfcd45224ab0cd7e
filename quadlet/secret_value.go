package quadlet

import (
	"bytes"
	"fmt"
)

// redacted is what a SecretValue prints as, whatever the verb.
const redacted = "[redacted]"

// SecretValue is one value of a Secret. It prints, formats and marshals as
// "[redacted]", so that logging a struct that holds one leaks nothing;
// Reveal is the only way to the bytes.
type SecretValue struct {
	b []byte
}

// NewSecretValue wraps b (not copied).
func NewSecretValue(b []byte) SecretValue { return SecretValue{b: b} }

// Reveal returns the value's bytes. Call it only where the value leaves KAT
// for its consumer: the seal, the delivery to a node, the file or
// environment of a container.
func (v SecretValue) Reveal() []byte { return v.b }

// Len is the value's length in bytes.
func (v SecretValue) Len() int { return len(v.b) }

// Equal reports whether two values hold the same bytes.
func (v SecretValue) Equal(o SecretValue) bool { return bytes.Equal(v.b, o.b) }

// String returns "[redacted]".
func (SecretValue) String() string { return redacted }

// GoString returns "[redacted]".
func (SecretValue) GoString() string { return redacted }

// Format writes "[redacted]" for every verb.
func (SecretValue) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalJSON returns the JSON string "[redacted]".
func (SecretValue) MarshalJSON() ([]byte, error) { return []byte(`"` + redacted + `"`), nil }

// MarshalText returns "[redacted]".
func (SecretValue) MarshalText() ([]byte, error) { return []byte(redacted), nil }
