package quadlet

import (
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// IntOrPercent is a count that may also be written as a percentage, as
// maxSurge is: the number 2 or the string "25%". Its zero value is the number
// 0. It marshals back as it was given.
type IntOrPercent struct {
	n       int
	percent bool
}

// FromInt returns an IntOrPercent holding the number n.
func FromInt(n int) IntOrPercent { return IntOrPercent{n: n} }

// FromPercent returns an IntOrPercent holding p percent.
func FromPercent(p int) IntOrPercent { return IntOrPercent{n: p, percent: true} }

// IsPercent reports whether v holds a percentage.
func (v IntOrPercent) IsPercent() bool { return v.percent }

// Raw returns the number or percentage as written, without the '%'.
func (v IntOrPercent) Raw() int { return v.n }

// Value returns the absolute count v stands for given total: the number
// itself, or the percentage of total rounded up.
func (v IntOrPercent) Value(total int) int {
	if !v.percent {
		return v.n
	}
	if total <= 0 || v.n <= 0 {
		return 0
	}
	return (total*v.n + 99) / 100
}

// String returns "N" or "N%".
func (v IntOrPercent) String() string {
	if v.percent {
		return strconv.Itoa(v.n) + "%"
	}
	return strconv.Itoa(v.n)
}

// parsePercent reads "N%" with N a decimal from 0 to 100.
func parsePercent(s string) (IntOrPercent, error) {
	num, percent := strings.CutSuffix(s, "%")
	if !percent {
		return IntOrPercent{}, fmt.Errorf("must be a number or a percentage such as \"25%%\", got %q", s)
	}
	n, err := strconv.Atoi(num)
	if err != nil || num == "" || num[0] == '+' || num[0] == '-' || (len(num) > 1 && num[0] == '0') {
		return IntOrPercent{}, fmt.Errorf("must be a number or a percentage such as \"25%%\", got %q", s)
	}
	if n > 100 {
		return IntOrPercent{}, fmt.Errorf("percentage must be between 0%% and 100%%, got %q", s)
	}
	return FromPercent(n), nil
}

func (v *IntOrPercent) decodeNode(n *yaml.Node) (string, bool) {
	if n.Kind != yaml.ScalarNode {
		return "must be a number or a percentage such as \"25%\", got " + describeNode(n), false
	}
	if i, ok := parseYAMLInt(n); ok {
		if i < 0 || i > 1<<31 {
			return fmt.Sprintf("must be at least 0, got %d", i), false
		}
		*v = FromInt(int(i))
		return "", true
	}
	p, err := parsePercent(n.Value)
	if err != nil {
		return err.Error(), false
	}
	*v = p
	return "", true
}

// MarshalJSON writes a number or a "N%" string.
func (v IntOrPercent) MarshalJSON() ([]byte, error) {
	if v.percent {
		return json.Marshal(v.String())
	}
	return json.Marshal(v.n)
}

// UnmarshalJSON reads a number or a "N%" string.
func (v *IntOrPercent) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*v = FromInt(n)
		return nil
	}
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("decode int or percent: %w", err)
	}
	p, err := parsePercent(s)
	if err != nil {
		return fmt.Errorf("decode int or percent: %w", err)
	}
	*v = p
	return nil
}

// MarshalYAML writes a number or a "N%" string.
func (v IntOrPercent) MarshalYAML() (any, error) {
	if v.percent {
		return v.String(), nil
	}
	return v.n, nil
}

// UnmarshalYAML reads a number or a "N%" string.
func (v *IntOrPercent) UnmarshalYAML(n *yaml.Node) error {
	if msg, ok := v.decodeNode(n); !ok {
		return fmt.Errorf("line %d: %s", n.Line, msg)
	}
	return nil
}
