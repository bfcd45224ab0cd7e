package quadlet

import (
	"encoding/json"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

func TestIntOrPercentValue(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		v     IntOrPercent
		total int
		want  int
	}{
		{"int", FromInt(2), 10, 2},
		{"int ignores total", FromInt(2), 0, 2},
		{"percent rounds up", FromPercent(25), 3, 1},
		{"percent exact", FromPercent(50), 10, 5},
		{"percent rounds up past half", FromPercent(34), 10, 4},
		{"hundred percent", FromPercent(100), 7, 7},
		{"zero percent", FromPercent(0), 7, 0},
		{"percent of zero", FromPercent(25), 0, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.v.Value(tc.total); got != tc.want {
				t.Errorf("%v.Value(%d) = %d, want %d", tc.v, tc.total, got, tc.want)
			}
		})
	}
}

func TestIntOrPercentRoundTrip(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name     string
		yaml     string
		want     IntOrPercent
		wantJSON string
		wantErr  string
	}{
		{name: "int", yaml: "1", want: FromInt(1), wantJSON: "1"},
		{name: "zero", yaml: "0", want: FromInt(0), wantJSON: "0"},
		{name: "percent", yaml: "25%", want: FromPercent(25), wantJSON: `"25%"`},
		{name: "quoted percent", yaml: `"100%"`, want: FromPercent(100), wantJSON: `"100%"`},
		{name: "over 100 percent", yaml: "101%", wantErr: "between 0% and 100%"},
		{name: "negative", yaml: "-1", wantErr: "at least 0"},
		{name: "negative percent", yaml: "-5%", wantErr: "number or a percentage"},
		{name: "string number", yaml: `"5"`, wantErr: "number or a percentage"},
		{name: "float", yaml: "1.5", wantErr: "number or a percentage"},
		{name: "list", yaml: "[1]", wantErr: "got a list"},
		{name: "leading zero percent", yaml: "05%", wantErr: "number or a percentage"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var v IntOrPercent
			err := yaml.Unmarshal([]byte(tc.yaml), &v)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("yaml.Unmarshal(%s) error = %v, want %q", tc.yaml, err, tc.wantErr)
				}
				return
			}
			if err != nil || v != tc.want {
				t.Fatalf("yaml.Unmarshal(%s) = %v, %v, want %v", tc.yaml, v, err, tc.want)
			}
			b, err := json.Marshal(v)
			if err != nil || string(b) != tc.wantJSON {
				t.Fatalf("json.Marshal = %s, %v, want %s", b, err, tc.wantJSON)
			}
			var back IntOrPercent
			if err := json.Unmarshal(b, &back); err != nil || back != v {
				t.Fatalf("json.Unmarshal(%s) = %v, %v, want %v", b, back, err, v)
			}
			out, err := yaml.Marshal(v)
			if err != nil {
				t.Fatal(err)
			}
			var again IntOrPercent
			if err := yaml.Unmarshal(out, &again); err != nil || again != v {
				t.Fatalf("yaml round trip via %q = %v, %v, want %v", out, again, err, v)
			}
		})
	}
}
