package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// Usage is what a node, or a workload's containers on it, used: CPU over
// the last sampling interval and memory in use, and byte counters.
type Usage struct {
	CPUMillis, MemoryBytes         int64
	DiskReadBytes, DiskWriteBytes  int64
	NetworkRxBytes, NetworkTxBytes int64
}

// WorkloadKey names a workload.
type WorkloadKey struct{ Namespace, Name string }

// usage is the collector of the node's last usage sample.
var usage = &usageCollector{}

// usageFamily is one family of the node's (kind "node") or its workloads'
// (kind "workload") usage.
type usageFamily struct {
	desc    *prometheus.Desc
	counter bool
	value   func(Usage) int64
}

func usageFamilies(kind, help string, labels []string) []usageFamily {
	return []usageFamily{
		{prometheus.NewDesc("kat_"+kind+"_cpu_usage_millicores", "CPU used by "+help+" over the last sampling interval, in thousandths of a core.", labels, nil),
			false, func(u Usage) int64 { return u.CPUMillis }},
		{prometheus.NewDesc("kat_"+kind+"_memory_usage_bytes", "Memory in use by "+help+".", labels, nil),
			false, func(u Usage) int64 { return u.MemoryBytes }},
		{prometheus.NewDesc("kat_"+kind+"_disk_read_bytes_total", "Bytes read from block devices by "+help+".", labels, nil),
			true, func(u Usage) int64 { return u.DiskReadBytes }},
		{prometheus.NewDesc("kat_"+kind+"_disk_written_bytes_total", "Bytes written to block devices by "+help+".", labels, nil),
			true, func(u Usage) int64 { return u.DiskWriteBytes }},
		{prometheus.NewDesc("kat_"+kind+"_network_receive_bytes_total", "Bytes received by "+help+" (every interface but loopback).", labels, nil),
			true, func(u Usage) int64 { return u.NetworkRxBytes }},
		{prometheus.NewDesc("kat_"+kind+"_network_transmit_bytes_total", "Bytes sent by "+help+" (every interface but loopback).", labels, nil),
			true, func(u Usage) int64 { return u.NetworkTxBytes }},
	}
}

var (
	nodeUsageFamilies     = usageFamilies("node", "the node", []string{"node"})
	workloadUsageFamilies = usageFamilies("workload", "a workload's running containers on the node (their counters since each started)", []string{"node", "namespace", "workload"})
)

// usageCollector serves the last sample as it was taken: a workload gone
// since is gone from the metrics too.
type usageCollector struct {
	mu        sync.Mutex
	node      string
	sampled   bool
	nodeUsage Usage
	workloads map[WorkloadKey]Usage
}

// SetUsage records the node's last usage sample, and its workloads'
// (their running containers on the node, summed).
func SetUsage(node string, nodeUsage Usage, workloads map[WorkloadKey]Usage) {
	usage.mu.Lock()
	defer usage.mu.Unlock()
	usage.node, usage.sampled, usage.nodeUsage, usage.workloads = node, true, nodeUsage, workloads
}

func (c *usageCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, f := range append(nodeUsageFamilies, workloadUsageFamilies...) {
		ch <- f.desc
	}
}

func (c *usageCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !c.sampled {
		return
	}
	emit := func(f usageFamily, u Usage, labels ...string) {
		t := prometheus.GaugeValue
		if f.counter {
			t = prometheus.CounterValue
		}
		ch <- prometheus.MustNewConstMetric(f.desc, t, float64(f.value(u)), labels...)
	}
	for _, f := range nodeUsageFamilies {
		emit(f, c.nodeUsage, c.node)
	}
	for k, u := range c.workloads {
		for _, f := range workloadUsageFamilies {
			emit(f, u, c.node, k.Namespace, k.Name)
		}
	}
}
