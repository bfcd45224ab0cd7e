package main

import (
	"strings"
	"testing"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		name string
		args string
		want command
		err  string
	}{
		{"up with a count", "up 5", command{up: true, hosts: 5}, ""},
		{"up through task", "up -- 2", command{up: true, hosts: 2}, ""},
		{"up defaults to 3", "up", command{up: true, hosts: 3}, ""},
		{"down", "down", command{}, ""},
		{"down through task", "down --", command{}, ""},
		{"no command", "", command{}, "usage"},
		{"zero hosts", "up 0", command{}, "from 1 to"},
		{"not a number", "up three", command{}, "from 1 to"},
		{"unknown", "restart", command{}, "usage"},
		{"extra", "down 3", command{}, "usage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := parseArgs(strings.Fields(tc.args))
			switch {
			case tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)):
				t.Errorf("parseArgs(%q): %v, want an error containing %q", tc.args, err, tc.err)
			case tc.err == "" && (err != nil || got != tc.want):
				t.Errorf("parseArgs(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
			}
		})
	}
}
