package main

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"go.yaml.in/yaml/v3"
)

// outputFormat is the -o flag.
type outputFormat string

const (
	formatTable outputFormat = "table"
	formatJSON  outputFormat = "json"
	formatYAML  outputFormat = "yaml"
)

func parseFormat(s string) (outputFormat, error) {
	switch f := outputFormat(s); f {
	case formatTable, formatJSON, formatYAML:
		return f, nil
	}
	return "", fmt.Errorf("-o: %q is not one of table, json, yaml", s)
}

// printData writes v as JSON or YAML (with the JSON field names).
func printData(w io.Writer, f outputFormat, v any) error {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	if f == formatJSON {
		_, err = fmt.Fprintln(w, string(b))
		return err
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	y, err := yaml.Marshal(generic)
	if err != nil {
		return fmt.Errorf("encode output: %w", err)
	}
	_, err = w.Write(y)
	return err
}

// table writes aligned columns.
type table struct {
	tw *tabwriter.Writer
}

func newTable(w io.Writer, headers ...string) *table {
	t := &table{tw: tabwriter.NewWriter(w, 0, 0, 3, ' ', 0)}
	t.row(headers...)
	return t
}

func (t *table) row(cols ...string) { fmt.Fprintln(t.tw, strings.Join(cols, "\t")) }

func (t *table) flush() error { return t.tw.Flush() }

// age renders how long ago t was, like "5m" or "3d".
func age(now, t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	d := now.Sub(t)
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d.Seconds()))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d.Minutes()))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d.Hours()))
	}
	return fmt.Sprintf("%dd", int(d.Hours()/24))
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
