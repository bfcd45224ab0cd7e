package agent

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
)

// GPU drivers, as workload.kat's resources.gpu.driver names them.
const (
	gpuNVIDIA = "nvidia"
	gpuAMD    = "amd"
)

// The CDI kinds the vendors' tools (nvidia-ctk cdi generate, amd-ctk cdi
// generate) name each GPU under, by its index: "nvidia.com/gpu=0".
const (
	cdiKindNVIDIA = "nvidia.com/gpu"
	cdiKindAMD    = "amd.com/gpu"
)

// DetectGPUs lists the node's NVIDIA GPUs (nvidia-smi) and AMD GPUs
// (rocm-smi), each with its CDI device name; a vendor whose tool is not
// installed or fails has none.
func DetectGPUs() []api.GPU { return detectGPUs(exec.LookPath) }

// detectGPUs is DetectGPUs with the tools found by lookPath. NVIDIA's GPUs
// come first; AMD's follow, numbered on from them.
func detectGPUs(lookPath func(string) (string, error)) []api.GPU {
	run := func(tool string, args ...string) string {
		path, err := lookPath(tool)
		if err != nil {
			return ""
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		out, err := exec.CommandContext(ctx, path, args...).Output()
		if err != nil {
			return ""
		}
		return string(out)
	}
	gpus := parseNvidiaSMI(run("nvidia-smi", "--query-gpu=index,name,memory.total", "--format=csv,noheader,nounits"))
	for _, g := range parseROCmSMI(run("rocm-smi", "--showproductname", "--showmeminfo", "vram", "--json")) {
		g.Index = len(gpus)
		gpus = append(gpus, g)
	}
	return gpus
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
		gpus = append(gpus, api.GPU{Index: idx, Name: strings.TrimSpace(f[1]), Driver: gpuNVIDIA, VRAMMiB: mem,
			Device: cdiKindNVIDIA + "=" + strconv.Itoa(idx)})
	}
	return gpus
}

// parseROCmSMI parses rocm-smi's JSON ({"card0": {"Card series": ...,
// "VRAM Total Memory (B)": ...}}), by card number; Index is the card's.
func parseROCmSMI(out string) []api.GPU {
	var cards map[string]map[string]string
	if json.Unmarshal([]byte(out), &cards) != nil {
		return nil
	}
	var gpus []api.GPU
	for key, f := range cards {
		n, ok := strings.CutPrefix(key, "card")
		idx, err := strconv.Atoi(n)
		if !ok || err != nil || idx < 0 {
			continue
		}
		name := f["Card series"]
		if name == "" {
			name = f["Card model"]
		}
		vram, _ := strconv.ParseInt(f["VRAM Total Memory (B)"], 10, 64)
		gpus = append(gpus, api.GPU{Index: idx, Name: name, Driver: gpuAMD, VRAMMiB: int(vram >> 20),
			Device: cdiKindAMD + "=" + strconv.Itoa(idx)})
	}
	slices.SortFunc(gpus, func(a, b api.GPU) int { return a.Index - b.Index })
	return gpus
}

// WithGPUs returns build with GPUs: an assignment holding a GPU
// (api.Assignment.GPU) gets that one GPU of gpus, the node's, by its CDI
// device name and nothing else; a GPU the node does not have, or has
// without a CDI name, fails the instance with an error naming it
// (runtime.ErrDeviceUnavailable).
func WithGPUs(build SpecBuilder, gpus []api.GPU) SpecBuilder {
	return func(a api.Assignment, q *quadlet.Quadlet, in SpecInputs) (runtime.ContainerSpec, error) {
		dev, err := gpuDevice(a, gpus)
		if err != nil {
			return runtime.ContainerSpec{}, err
		}
		cs, err := build(a, q, in)
		if err == nil && dev != "" {
			cs.Devices = append(cs.Devices, dev)
		}
		return cs, err
	}
}

// gpuDevice is the CDI device name of the GPU a holds, "" when it holds
// none.
func gpuDevice(a api.Assignment, gpus []api.GPU) (string, error) {
	if a.GPU == nil {
		return "", nil
	}
	i := slices.IndexFunc(gpus, func(g api.GPU) bool { return g.Index == *a.GPU })
	switch {
	case i < 0:
		return "", fmt.Errorf("%w: instance %s holds GPU %d, which this node does not have (it has %d)", runtime.ErrDeviceUnavailable, a.InstanceID, *a.GPU, len(gpus))
	case gpus[i].Device == "":
		return "", fmt.Errorf("%w: instance %s holds GPU %d (%s), which has no CDI device name", runtime.ErrDeviceUnavailable, a.InstanceID, *a.GPU, gpus[i].Name)
	}
	return gpus[i].Device, nil
}
