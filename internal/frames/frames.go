// Package frames carries several byte streams, and small messages, over one
// connection: each frame is a one-byte channel, a four-byte big-endian
// length and that many bytes.
//
// It is the wire format of an interactive command (katcall exec): the
// client's standard input and terminal size one way, the command's output,
// error output and exit status the other, over a connection an HTTP upgrade
// handed over.
//
//	w := frames.NewWriter(conn)
//	_ = w.Write(frames.Stdin, []byte("ls\n"))
//	r := frames.NewReader(conn)
//	ch, payload, err := r.Next()
//
// A Writer is safe for concurrent use; a Reader is not.
package frames

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
)

// Channels of the frames of an interactive command.
const (
	// Stdin carries the client's input; an empty Stdin frame is its end.
	Stdin byte = 0
	// Stdout and Stderr carry the command's output.
	Stdout byte = 1
	Stderr byte = 2
	// Exit carries the command's exit status as decimal digits; it is the
	// last frame of a command that ran.
	Exit byte = 3
	// Resize carries the client's terminal size: rows and columns, two
	// big-endian uint16 each.
	Resize byte = 4
	// Error carries why the command could not run or went on; the last
	// frame of a command that did not end with Exit.
	Error byte = 5
)

// MaxPayload bounds one frame's payload.
const MaxPayload = 1 << 20

// ErrTooLarge is returned by Next for a frame longer than MaxPayload.
var ErrTooLarge = errors.New("frames: frame too large")

// Writer writes frames.
type Writer struct {
	mu sync.Mutex
	w  io.Writer
}

// NewWriter returns a Writer to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes one frame of channel ch (payloads longer than MaxPayload
// are split into several).
func (w *Writer) Write(ch byte, p []byte) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	for first := true; first || len(p) > 0; first = false {
		n := min(len(p), MaxPayload)
		var hdr [5]byte
		hdr[0] = ch
		binary.BigEndian.PutUint32(hdr[1:], uint32(n)) //nolint:gosec // n <= MaxPayload
		if _, err := w.w.Write(append(hdr[:], p[:n]...)); err != nil {
			return fmt.Errorf("write a frame: %w", err)
		}
		p = p[n:]
	}
	return nil
}

// Stream returns an io.Writer whose writes are frames of channel ch.
func (w *Writer) Stream(ch byte) io.Writer { return streamWriter{w, ch} }

type streamWriter struct {
	w  *Writer
	ch byte
}

func (s streamWriter) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil // an empty frame would mean the end of the stream
	}
	if err := s.w.Write(s.ch, p); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Reader reads frames.
type Reader struct {
	r *bufio.Reader
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader { return &Reader{r: bufio.NewReader(r)} }

// Next returns the next frame's channel and payload; io.EOF when the
// stream ends between frames.
func (r *Reader) Next() (byte, []byte, error) {
	var hdr [5]byte
	if _, err := io.ReadFull(r.r, hdr[:]); err != nil {
		if errors.Is(err, io.ErrUnexpectedEOF) {
			return 0, nil, fmt.Errorf("read a frame: %w", err)
		}
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(hdr[1:])
	if n > MaxPayload {
		return 0, nil, fmt.Errorf("%w: %d bytes", ErrTooLarge, n)
	}
	p := make([]byte, n)
	if _, err := io.ReadFull(r.r, p); err != nil {
		return 0, nil, fmt.Errorf("read a frame of %d bytes: %w", n, err)
	}
	return hdr[0], p, nil
}

// Size is a terminal's size.
type Size struct{ Rows, Cols uint16 }

// Encode is s as a Resize payload.
func (s Size) Encode() []byte {
	var b [4]byte
	binary.BigEndian.PutUint16(b[:2], s.Rows)
	binary.BigEndian.PutUint16(b[2:], s.Cols)
	return b[:]
}

// DecodeSize reads a Resize payload.
func DecodeSize(p []byte) (Size, error) {
	if len(p) != 4 {
		return Size{}, fmt.Errorf("frames: a terminal size is 4 bytes, not %d", len(p))
	}
	return Size{Rows: binary.BigEndian.Uint16(p[:2]), Cols: binary.BigEndian.Uint16(p[2:])}, nil
}
