package agent

import (
	"bufio"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"strings"

	"kat.dws.rip/kat/api"
)

// System reservations subtracted from capacity to get what is allocatable to
// workloads: a tenth of the CPU, and a tenth of the memory capped at 1 GiB.
const (
	reservedCPUFraction = 10
	maxReservedMemory   = 1 << 30
)

// DetectResources reads this host's CPU count and memory and derives what is
// allocatable to workloads.
func DetectResources() (api.NodeResources, error) {
	memBytes, err := memTotal("/proc/meminfo")
	if err != nil {
		return api.NodeResources{}, err
	}
	return resourcesFor(int64(runtime.NumCPU())*1000, memBytes), nil
}

func resourcesFor(milliCPU, memBytes int64) api.NodeResources {
	reservedMem := min(memBytes/10, maxReservedMemory)
	return api.NodeResources{
		Capacity: api.ResourceList{CPU: fmt.Sprintf("%dm", milliCPU), Memory: fmt.Sprintf("%dMi", memBytes>>20)},
		Allocatable: api.ResourceList{
			CPU:    fmt.Sprintf("%dm", milliCPU-milliCPU/reservedCPUFraction),
			Memory: fmt.Sprintf("%dMi", (memBytes-reservedMem)>>20),
		},
	}
}

func memTotal(path string) (int64, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, fmt.Errorf("read memory size: %w", err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		rest, ok := strings.CutPrefix(sc.Text(), "MemTotal:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		if err != nil {
			return 0, fmt.Errorf("parse MemTotal in %s: %w", path, err)
		}
		return kb << 10, nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("read %s: %w", path, err)
	}
	return 0, fmt.Errorf("no MemTotal in %s", path)
}
