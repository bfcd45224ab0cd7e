package quadlet

import (
	"fmt"
	"math"
	"math/big"
	"strings"
)

// maxQuantityLen bounds the text of a quantity, which keeps the exact
// arithmetic below cheap.
const maxQuantityLen = 40

// memorySuffixes are the multipliers ParseMemory accepts, longest first.
var memorySuffixes = []struct {
	suffix string
	mult   int64
}{
	{"Ki", 1 << 10}, {"Mi", 1 << 20}, {"Gi", 1 << 30}, {"Ti", 1 << 40}, {"Pi", 1 << 50}, {"Ei", 1 << 60},
	{"k", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12}, {"P", 1e15}, {"E", 1e18},
}

// ParseCPU parses a CPU quantity into millicores: a number of cores such as
// "1", "0.5" or "2.25", or a whole number of millicores such as "100m".
// Negative values, exponents and precision finer than one millicore are
// refused.
func ParseCPU(s string) (millicores int64, err error) {
	num, milli := strings.CutSuffix(s, "m")
	mult := int64(1000)
	if milli {
		mult = 1
	}
	v, err := exactQuantity(num, mult)
	if err != nil {
		return 0, fmt.Errorf("invalid cpu quantity %q: %w (want cores such as \"0.5\" or millicores such as \"500m\")", s, err)
	}
	if !v.IsInt() {
		return 0, fmt.Errorf("invalid cpu quantity %q: finer than 1m", s)
	}
	return v.Num().Int64(), nil
}

// ParseMemory parses a memory quantity into bytes: a number with an optional
// suffix, binary (Ki, Mi, Gi, Ti, Pi, Ei) or decimal (k, M, G, T, P, E), for
// example "64Mi", "1.5Gi", "128M" or "1048576". Negative values, other
// suffixes, fractions of a byte and values beyond int64 are refused.
func ParseMemory(s string) (bytes int64, err error) {
	num, mult := s, int64(1)
	for _, sfx := range memorySuffixes {
		if n, ok := strings.CutSuffix(s, sfx.suffix); ok {
			num, mult = n, sfx.mult
			break
		}
	}
	v, err := exactQuantity(num, mult)
	if err != nil {
		return 0, fmt.Errorf("invalid memory quantity %q: %w (want bytes with an optional suffix Ki, Mi, Gi, Ti, Pi, Ei, k, M, G, T, P or E)", s, err)
	}
	if !v.IsInt() {
		return 0, fmt.Errorf("invalid memory quantity %q: not a whole number of bytes", s)
	}
	return v.Num().Int64(), nil
}

// exactQuantity parses an unsigned decimal number and multiplies it by mult,
// exactly. The result fits in an int64 when it is a whole number.
func exactQuantity(num string, mult int64) (*big.Rat, error) {
	if num == "" {
		return nil, fmt.Errorf("no number")
	}
	if len(num) > maxQuantityLen {
		return nil, fmt.Errorf("too long")
	}
	whole, frac, hasDot := strings.Cut(num, ".")
	if whole == "" || !allDigits(whole) || (hasDot && (frac == "" || !allDigits(frac))) {
		return nil, fmt.Errorf("not a plain non-negative number")
	}
	v, ok := new(big.Rat).SetString(num)
	if !ok {
		return nil, fmt.Errorf("not a plain non-negative number")
	}
	v.Mul(v, new(big.Rat).SetInt64(mult))
	if v.Cmp(new(big.Rat).SetInt64(math.MaxInt64)) > 0 {
		return nil, fmt.Errorf("too large")
	}
	return v, nil
}

func allDigits(s string) bool {
	for _, r := range s {
		if r < '0' || r > '9' {
			return false
		}
	}
	return true
}
