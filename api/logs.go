package api

import (
	"fmt"
	"net/url"
	"strconv"
	"time"
)

// LogOptions selects the output of an instance's container that GET
// .../workloads/{name}/logs (and the agent API's instance logs) return.
type LogOptions struct {
	// Follow keeps streaming new output, across restarts of the
	// container, until the client goes away or the instance is removed.
	Follow bool
	// Tail returns only the last Tail lines. Default 0: all.
	Tail int
	// Since returns only output written at or after it. Default zero: all.
	Since time.Time
	// Timestamps prefixes each line with the time it was written
	// (RFC 3339).
	Timestamps bool
	// Previous returns the output of the container's previous run (before
	// its last restart) instead of the current one.
	Previous bool
}

// Query parameters of the logs endpoints.
const (
	LogParamFollow     = "follow"
	LogParamTail       = "tail"
	LogParamSince      = "since"
	LogParamTimestamps = "timestamps"
	LogParamPrevious   = "previous"
	// LogParamAll asks the leader for every instance of the workload at
	// once, each line prefixed with "[instanceID] ".
	LogParamAll = "all"
)

// Values is o as query parameters.
func (o LogOptions) Values() url.Values {
	v := url.Values{LogParamFollow: {strconv.FormatBool(o.Follow)}}
	if o.Tail > 0 {
		v.Set(LogParamTail, strconv.Itoa(o.Tail))
	}
	if !o.Since.IsZero() {
		v.Set(LogParamSince, o.Since.UTC().Format(time.RFC3339Nano))
	}
	if o.Timestamps {
		v.Set(LogParamTimestamps, "true")
	}
	if o.Previous {
		v.Set(LogParamPrevious, "true")
	}
	return v
}

// ParseLogOptions reads LogOptions from query parameters; since may be an
// RFC 3339 time or a duration counted back from now (ParseSince). Its
// error names the parameter that is wrong.
func ParseLogOptions(get func(string) string, now time.Time) (LogOptions, error) {
	var o LogOptions
	for _, b := range []struct {
		name string
		to   *bool
	}{{LogParamFollow, &o.Follow}, {LogParamTimestamps, &o.Timestamps}, {LogParamPrevious, &o.Previous}} {
		if v := get(b.name); v != "" {
			x, err := strconv.ParseBool(v)
			if err != nil {
				return o, fmt.Errorf("%s: %q is not true or false", b.name, v)
			}
			*b.to = x
		}
	}
	if v := get(LogParamTail); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			return o, fmt.Errorf("%s: %q is not a non-negative number of lines", LogParamTail, v)
		}
		o.Tail = n
	}
	if v := get(LogParamSince); v != "" {
		t, err := ParseSince(v, now)
		if err != nil {
			return o, fmt.Errorf("%s: %w", LogParamSince, err)
		}
		o.Since = t
	}
	if o.Previous && o.Follow {
		return o, fmt.Errorf("%s: the previous run has ended: it cannot be followed", LogParamPrevious)
	}
	return o, nil
}
