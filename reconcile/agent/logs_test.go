package agent

import (
	"bytes"
	"testing"
	"time"
)

// TestStampedLines checks the cutting of a log read with timestamps: the
// window, the stamps kept or dropped, the tail, lines in pieces and lines
// without a stamp.
func TestStampedLines(t *testing.T) {
	t.Parallel()
	at := func(s int) time.Time { return time.Date(2026, 1, 2, 3, 4, s, 0, time.UTC) }
	log := "2026-01-02T03:04:01.000000001Z one\n" +
		"2026-01-02T03:04:02Z two\n" +
		"no stamp\n" +
		"2026-01-02T03:04:03Z three\n" +
		"2026-01-02T03:04:04Z four"
	tests := []struct {
		name string
		s    stampedLines
		want string
	}{
		{name: "all, stamps dropped", want: "one\ntwo\nno stamp\nthree\nfour"},
		{name: "stamps kept", s: stampedLines{keepStamp: true}, want: log},
		{name: "after a time", s: stampedLines{after: at(2)}, want: "no stamp\nthree\nfour"},
		{name: "a window", s: stampedLines{after: at(1), until: at(3)}, want: "one\ntwo\nno stamp\nthree\n"},
		{name: "tail of a window", s: stampedLines{until: at(3), tail: 2}, want: "no stamp\nthree\n"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			s := tc.s
			s.w = &out
			// Written in pieces that split lines and stamps.
			for i := 0; i < len(log); i += 7 {
				if _, err := s.Write([]byte(log[i:min(i+7, len(log))])); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.flush(); err != nil {
				t.Fatal(err)
			}
			if err := s.flushTail(); err != nil {
				t.Fatal(err)
			}
			if out.String() != tc.want {
				t.Fatalf("got %q, want %q", out.String(), tc.want)
			}
		})
	}
}
