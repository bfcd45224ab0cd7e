package metrics

import (
	"fmt"

	dto "github.com/prometheus/client_model/go"
)

// Value returns the sum over the series of family name whose labels
// include labels (see Sum). It is for tests (did the event move its
// family?) and debugging; a family without a matching series is 0.
func Value(name string, labels map[string]string) (float64, error) {
	families, err := registry.Gather()
	if err != nil {
		return 0, fmt.Errorf("gather metrics: %w", err)
	}
	var sum float64
	for _, f := range families {
		if f.GetName() == name {
			sum += Sum(f, labels)
		}
	}
	return sum, nil
}

// Sum is the sum over the series of f whose labels include labels: a
// counter's or gauge's value, a histogram's count of observations. f may
// come from this process's registry or from a scrape's text.
func Sum(f *dto.MetricFamily, labels map[string]string) float64 {
	var sum float64
	for _, m := range f.GetMetric() {
		if !hasLabels(m, labels) {
			continue
		}
		switch {
		case m.Counter != nil:
			sum += m.Counter.GetValue()
		case m.Gauge != nil:
			sum += m.Gauge.GetValue()
		case m.Histogram != nil:
			sum += float64(m.Histogram.GetSampleCount())
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	found := 0
	for _, lp := range m.GetLabel() {
		if v, ok := want[lp.GetName()]; ok {
			if v != lp.GetValue() {
				return false
			}
			found++
		}
	}
	return found == len(want)
}
