package testenv

import "testing"

// TestCheckJSONLineFindsRepeatedKeys keeps the checker honest.
func TestCheckJSONLineFindsRepeatedKeys(t *testing.T) {
	t.Parallel()
	for line, ok := range map[string]bool{
		`{"level":"info","component":"agent","message":"x"}`: true,
		`{"component":"kat-agent","component":"agent"}`:      false,
		`{"a":{"b":1,"b":2}}`:                                false,
		`{"a":[{"b":1},{"b":2}]}`:                            true,
		`{"a":1} {"b":2}`:                                    false,
	} {
		if err := CheckJSONLine(line); (err == nil) != ok {
			t.Errorf("CheckJSONLine(%s) = %v, want ok %v", line, err, ok)
		}
	}
}
