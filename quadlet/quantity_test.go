package quadlet

import (
	"math"
	"strconv"
	"testing"
)

func TestParseCPU(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "100m", want: 100},
		{in: "0.5", want: 500},
		{in: "1", want: 1000},
		{in: "2.25", want: 2250},
		{in: "0", want: 0},
		{in: "0m", want: 0},
		{in: "0.001", want: 1},
		{in: "1500m", want: 1500},
		{in: "64", want: 64000},
		{in: "0.0001", wantErr: true}, // finer than 1m
		{in: "1.5m", wantErr: true},
		{in: "", wantErr: true},
		{in: "m", wantErr: true},
		{in: "-1", wantErr: true},
		{in: "+1", wantErr: true},
		{in: "1e3", wantErr: true},
		{in: "1.", wantErr: true},
		{in: ".5", wantErr: true},
		{in: "1 ", wantErr: true},
		{in: "1Gi", wantErr: true},
		{in: "one", wantErr: true},
		{in: "99999999999999999999", wantErr: true}, // overflow
		{in: "9223372036854775807m", want: math.MaxInt64},
		{in: "9223372036854775808m", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := ParseCPU(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseCPU(%q) = %d, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseCPU(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
			}
		})
	}
}

func TestParseMemory(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in      string
		want    int64
		wantErr bool
	}{
		{in: "64Mi", want: 64 << 20},
		{in: "1Gi", want: 1 << 30},
		{in: "512Ki", want: 512 << 10},
		{in: "128M", want: 128e6},
		{in: "1G", want: 1e9},
		{in: "1000k", want: 1e6},
		{in: "1048576", want: 1 << 20},
		{in: "1.5Gi", want: 3 << 29},
		{in: "0.5k", want: 500},
		{in: "1Ti", want: 1 << 40},
		{in: "2Pi", want: 2 << 50},
		{in: "7Ei", want: 7 << 60},
		{in: "9E", want: 9e18},
		{in: "0", want: 0},
		{in: "8Ei", wantErr: true}, // overflow
		{in: "10E", wantErr: true},
		{in: "99999999999999999999", wantErr: true},
		{in: "1.1", wantErr: true}, // a fraction of a byte
		{in: "64MB", wantErr: true},
		{in: "64mi", wantErr: true},
		{in: "1K", wantErr: true},
		{in: "1m", wantErr: true},
		{in: "1b", wantErr: true},
		{in: "-1Mi", wantErr: true},
		{in: "+1Mi", wantErr: true},
		{in: "1e6", wantErr: true},
		{in: "Mi", wantErr: true},
		{in: "", wantErr: true},
		{in: " 1Mi", wantErr: true},
		{in: "1 Mi", wantErr: true},
		{in: "0x10", wantErr: true},
	}
	for _, tc := range tests {
		t.Run(strconv.Quote(tc.in), func(t *testing.T) {
			got, err := ParseMemory(tc.in)
			if tc.wantErr {
				if err == nil {
					t.Fatalf("ParseMemory(%q) = %d, want an error", tc.in, got)
				}
				return
			}
			if err != nil || got != tc.want {
				t.Fatalf("ParseMemory(%q) = %d, %v, want %d", tc.in, got, err, tc.want)
			}
		})
	}
}
