package node

import (
	"io"
	"os"
	"time"

	"github.com/rs/zerolog"
)

// NewLogger returns the process's root logger: JSON lines on w, or
// human-readable lines for format "console" (and "auto" on a terminal),
// stamped to the millisecond (zerolog's time format is process-wide). Each
// component adds its own "component" field to a sub-logger, so a line carries
// the key once.
func NewLogger(level, format string, w io.Writer) zerolog.Logger {
	zerolog.TimeFieldFormat = "2006-01-02T15:04:05.000Z07:00"
	lvl, err := zerolog.ParseLevel(level)
	if err != nil {
		lvl = zerolog.InfoLevel
	}
	if f, ok := w.(*os.File); format == "console" || (format == "auto" && ok && isTerminal(f)) {
		w = zerolog.ConsoleWriter{Out: w, TimeFormat: time.TimeOnly}
	}
	return zerolog.New(w).Level(lvl).With().Timestamp().Logger()
}

func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
