package frames

import (
	"bytes"
	"errors"
	"io"
	"testing"
)

func TestRoundTrip(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	w := NewWriter(&buf)
	big := bytes.Repeat([]byte("x"), MaxPayload+3)
	if _, err := w.Stream(Stdout).Write([]byte("hello")); err != nil {
		t.Fatal(err)
	}
	if n, err := w.Stream(Stdout).Write(nil); n != 0 || err != nil {
		t.Fatalf("empty stream write: %d, %v", n, err)
	}
	for _, f := range []struct {
		ch byte
		p  []byte
	}{{Stdin, nil}, {Resize, Size{Rows: 24, Cols: 80}.Encode()}, {Stderr, big}, {Exit, []byte("3")}} {
		if err := w.Write(f.ch, f.p); err != nil {
			t.Fatal(err)
		}
	}
	r := NewReader(&buf)
	var got []string
	for {
		ch, p, err := r.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch ch {
		case Resize:
			s, err := DecodeSize(p)
			if err != nil || s != (Size{24, 80}) {
				t.Fatalf("size %v, %v", s, err)
			}
			got = append(got, "resize")
		default:
			got = append(got, string(rune('0'+ch))+":"+string(p[:min(len(p), 5)]))
		}
	}
	want := []string{"1:hello", "0:", "resize", "2:xxxxx", "2:xxx", "3:3"}
	if len(got) != len(want) {
		t.Fatalf("frames %q, want %q", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("frames %q, want %q", got, want)
		}
	}
}

func TestRefusesLargeAndCutFrames(t *testing.T) {
	t.Parallel()
	if _, _, err := NewReader(bytes.NewReader([]byte{1, 0xff, 0, 0, 0})).Next(); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("huge frame: %v", err)
	}
	if _, _, err := NewReader(bytes.NewReader([]byte{1, 0, 0, 0, 9, 'a'})).Next(); err == nil || errors.Is(err, io.EOF) {
		t.Fatalf("cut frame: %v", err)
	}
	if _, err := DecodeSize([]byte{1}); err == nil {
		t.Fatal("short size accepted")
	}
}
