package agent

import (
	"context"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
)

// DetectGPUs lists the node's NVIDIA GPUs with nvidia-smi; none when it is
// not installed or fails.
func DetectGPUs() []api.GPU {
	path, err := exec.LookPath("nvidia-smi")
	if err != nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, path, "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return nil
	}
	return parseNvidiaSMI(string(out))
}

// parseNvidiaSMI parses "index, name, memory MiB" lines.
func parseNvidiaSMI(out string) []api.GPU {
	var gpus []api.GPU
	for line := range strings.Lines(out) {
		f := strings.Split(line, ",")
		if len(f) != 3 {
			continue
		}
		idx, err1 := strconv.Atoi(strings.TrimSpace(f[0]))
		mem, err2 := strconv.Atoi(strings.TrimSpace(f[2]))
		if err1 != nil || err2 != nil {
			continue
		}
		gpus = append(gpus, api.GPU{Index: idx, Name: strings.TrimSpace(f[1]), Driver: "nvidia", VRAMMiB: mem})
	}
	return gpus
}
