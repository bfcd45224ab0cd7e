package metrics

import (
	"sync"

	"github.com/prometheus/client_golang/prometheus"
)

// EtcdStatus is what an etcd member reports of itself, read at each scrape.
type EtcdStatus struct {
	// IsLeader is true when this member is the raft leader.
	IsLeader bool
	// HasLeader is true when the member knows a raft leader.
	HasLeader bool
	// IsLearner is true while the member is a learner (not yet voting).
	IsLearner bool
	// DBSizeBytes is the size of the backend database file.
	DBSizeBytes int64
	// DBSizeInUseBytes is the part of the file in use (the rest is freed
	// by defragmentation).
	DBSizeInUseBytes int64
	// Members is the number of members of the etcd cluster, learners
	// included.
	Members int
}

// etcd is the collector of the etcd member this process runs, if any.
var etcd = &etcdCollector{}

var (
	etcdIsLeader = prometheus.NewDesc("kat_etcd_is_leader",
		"1 when the etcd member this node runs is the raft leader, else 0.", nil, nil)
	etcdHasLeader = prometheus.NewDesc("kat_etcd_has_leader",
		"1 when the etcd member this node runs knows a raft leader, else 0.", nil, nil)
	etcdIsLearner = prometheus.NewDesc("kat_etcd_is_learner",
		"1 while the etcd member this node runs is a learner (not yet voting), else 0.", nil, nil)
	etcdDBSize = prometheus.NewDesc("kat_etcd_db_size_bytes",
		"Size of the etcd member's database file.", nil, nil)
	etcdDBInUse = prometheus.NewDesc("kat_etcd_db_size_in_use_bytes",
		"Part of the etcd member's database file in use.", nil, nil)
	etcdMembers = prometheus.NewDesc("kat_etcd_members",
		"Members of the etcd cluster, learners included, as this node's member sees it.", nil, nil)
)

// etcdCollector reads the member's status at each scrape. Without a
// status source it collects nothing: a worker runs no etcd member.
type etcdCollector struct {
	mu     sync.Mutex
	status func() EtcdStatus
	owner  *int // who set status, so only they can clear it
}

// SetEtcdStatus makes status the source of the kat_etcd_ families; it is
// called at each scrape and must not block for long. The returned func
// clears it again (unless another source was set since): call it before
// the member stops.
func SetEtcdStatus(status func() EtcdStatus) (clear func()) {
	owner := new(int)
	etcd.mu.Lock()
	etcd.status, etcd.owner = status, owner
	etcd.mu.Unlock()
	return func() {
		etcd.mu.Lock()
		defer etcd.mu.Unlock()
		if etcd.owner == owner {
			etcd.status, etcd.owner = nil, nil
		}
	}
}

func (c *etcdCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{etcdIsLeader, etcdHasLeader, etcdIsLearner, etcdDBSize, etcdDBInUse, etcdMembers} {
		ch <- d
	}
}

func (c *etcdCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	status := c.status
	c.mu.Unlock()
	if status == nil {
		return
	}
	s := status()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	gauge(etcdIsLeader, boolValue(s.IsLeader))
	gauge(etcdHasLeader, boolValue(s.HasLeader))
	gauge(etcdIsLearner, boolValue(s.IsLearner))
	gauge(etcdDBSize, float64(s.DBSizeBytes))
	gauge(etcdDBInUse, float64(s.DBSizeInUseBytes))
	gauge(etcdMembers, float64(s.Members))
}

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
