// Package metricstest reads KAT's metrics in tests.
package metricstest

import (
	"testing"

	"kat.dws.rip/kat/internal/metrics"
)

// Value is metrics.Value, failing t when the registry cannot be gathered.
func Value(t testing.TB, family string, labels map[string]string) float64 {
	t.Helper()
	v, err := metrics.Value(family, labels)
	if err != nil {
		t.Fatal(err)
	}
	return v
}
