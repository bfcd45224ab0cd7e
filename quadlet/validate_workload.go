package quadlet

import (
	"fmt"
	"sort"
	"strconv"
)

func validateMeta(c *checker, m ObjectMeta) {
	if c.required("metadata.name") {
		c.check("metadata.name", m.Name, dnsLabel)
	}
	validateLabels(c, "metadata.labels", m.Labels)
}

func validateLabels(c *checker, path string, labels map[string]string) {
	for _, k := range sortedKeys(labels) {
		c.check(path+"["+strconv.Quote(k)+"]", k, mapKey)
	}
}

func validateWorkload(c *checker, w *Workload) {
	c.checkHeader(KindWorkload)
	if !c.required("metadata") {
		return
	}
	validateMeta(c, w.Metadata)
	c.check("metadata.namespace", w.Metadata.Namespace, dnsLabel)
	if !c.required("spec") {
		return
	}
	s := &w.Spec
	if c.required("spec.type") {
		c.oneOf("spec.type", s.Type, TypeService, TypeJob, TypeDaemonService)
	}
	validateSource(c, &s.Source)
	switch {
	case s.Replicas != nil:
		c.atLeast("spec.replicas", *s.Replicas, 0)
	case s.Type == TypeService:
		c.errorf("spec.replicas", "is required for a Service")
	}
	// maxSurge is range-checked as it is decoded.
	if u := s.UpdateStrategy; u != nil {
		c.oneOf("spec.updateStrategy.type", u.Type, UpdateRolling, UpdateSimultaneous)
		validateNodeByNode(c, s.Type, u)
		if d := u.ProgressDeadlineSeconds; d != nil {
			c.atLeast("spec.updateStrategy.progressDeadlineSeconds", *d, 1)
			if *d > maxProgressDeadlineSeconds {
				c.errorf("spec.updateStrategy.progressDeadlineSeconds", "must be at most %d (a day), got %d", maxProgressDeadlineSeconds, *d)
			}
		}
	}
	if c.required("spec.restartPolicy") {
		r := s.RestartPolicy
		if c.required("spec.restartPolicy.condition") {
			c.oneOf("spec.restartPolicy.condition", r.Condition, RestartNever, RestartMaxCount, RestartAlways)
		}
		if c.has("spec.restartPolicy.maxRestarts") {
			c.atLeast("spec.restartPolicy.maxRestarts", r.MaxRestarts, 1)
		}
		if c.has("spec.restartPolicy.resetSeconds") {
			c.atLeast("spec.restartPolicy.resetSeconds", r.ResetSeconds, 1)
		}
	}
	for _, k := range sortedKeys(s.NodeSelector) {
		c.check("spec.nodeSelector["+strconv.Quote(k)+"]", k, mapKey)
	}
	for i, t := range s.Tolerations {
		validateToleration(c, fmt.Sprintf("spec.tolerations[%d]", i), t)
	}
	volumes := validateVolumes(c, s.Volumes)
	if c.required("spec.container") {
		validateContainer(c, &s.Container, volumes, secretVolumeNames(s.Volumes))
	}
}

func validateSource(c *checker, src *Source) {
	if !c.required("spec.source") || c.failed("spec.source.image") || c.failed("spec.source.git") {
		return
	}
	switch {
	case src.Image != "" && src.Git != nil:
		c.errorf("spec.source", "set only one of image and git")
	case src.Image == "" && src.Git == nil:
		c.errorf("spec.source", "set one of image or git")
	case src.Image != "":
		c.check("spec.source.image", src.Image, noSpace)
	}
	if g := src.Git; g != nil {
		if c.required("spec.source.git.repository") {
			c.check("spec.source.git.repository", g.Repository, gitURL)
		}
		if g.Branch != "" {
			c.check("spec.source.git.branch", g.Branch, gitRef)
		}
		if g.Tag != "" {
			c.check("spec.source.git.tag", g.Tag, gitRef)
		}
		if g.Commit != "" {
			c.check("spec.source.git.commit", g.Commit, commitHash)
		}
	}
	if src.CacheImage != "" {
		if src.Git == nil {
			c.errorf("spec.source.cacheImage", "is only used with a git source")
		} else {
			c.check("spec.source.cacheImage", src.CacheImage, noSpace)
		}
	}
}

func validateToleration(c *checker, path string, t Toleration) {
	if t.Key != "" {
		c.check(path+".key", t.Key, mapKey)
	}
	if c.oneOf(path+".operator", t.Operator, "Exists", "Equal") {
		switch {
		case t.Operator == "Equal" && t.Key == "":
			c.errorf(path+".key", "is required when operator is Equal")
		case t.Operator == "Equal" && !c.has(path+".value"):
			c.errorf(path+".value", "is required when operator is Equal")
		case t.Operator == "Exists" && t.Value != "":
			c.errorf(path+".value", "must be empty when operator is Exists")
		}
	}
	if t.Effect != "" {
		c.oneOf(path+".effect", t.Effect, "NoSchedule", "PreferNoSchedule")
	}
}

// validateVolumes checks the volumes and returns the set of their names.
func validateVolumes(c *checker, vols []Volume) map[string]bool {
	names := map[string]bool{}
	for i, v := range vols {
		p := fmt.Sprintf("spec.volumes[%d]", i)
		if c.required(p + ".name") {
			c.check(p+".name", v.Name, dnsLabel)
			if names[v.Name] {
				c.errorf(p+".name", "volume %q is defined more than once", v.Name)
			}
			names[v.Name] = true
		}
		set := 0
		for _, b := range []bool{v.SimpleClusterStorage != nil, v.HostMount != nil, v.Secret != nil} {
			if b {
				set++
			}
		}
		switch {
		case set > 1:
			c.errorf(p, "set only one of simpleClusterStorage, hostMount and secret")
		case set == 0:
			c.errorf(p, "set one of simpleClusterStorage ({}), hostMount or secret")
		case v.Secret != nil:
			if c.required(p + ".secret.secretName") {
				c.check(p+".secret.secretName", v.Secret.SecretName, dnsLabel)
			}
		case v.HostMount != nil:
			if c.required(p + ".hostMount.hostPath") {
				c.check(p+".hostMount.hostPath", v.HostMount.HostPath, cleanAbsPath)
			}
			if t := v.HostMount.EnsureType; t != "" {
				c.oneOf(p+".hostMount.ensureType", t, "DirectoryOrCreate", "Directory", "FileOrCreate", "File", "Socket")
			}
		}
	}
	return names
}

// maxProgressDeadlineSeconds bounds a rollout's progress deadline.
const maxProgressDeadlineSeconds = 86400

// maxStopGracePeriodSeconds bounds a container's stop grace.
const maxStopGracePeriodSeconds = 3600

func validateContainer(c *checker, ct *Container, volumes, secretVolumes map[string]bool) {
	const p = "spec.container"
	if ct.Name != "" {
		c.check(p+".name", ct.Name, dnsLabel)
	}
	if g := ct.StopGracePeriodSeconds; g != nil {
		c.atLeast(p+".stopGracePeriodSeconds", *g, 0)
		if *g > maxStopGracePeriodSeconds {
			c.errorf(p+".stopGracePeriodSeconds", "must be at most %d (an hour), got %d", maxStopGracePeriodSeconds, *g)
		}
	}
	env := map[string]bool{}
	for i, e := range ct.Env {
		ep := fmt.Sprintf("%s.env[%d].name", p, i)
		if !c.required(ep) {
			continue
		}
		c.check(ep, e.Name, envName)
		if env[e.Name] {
			c.errorf(ep, "variable %q is set more than once", e.Name)
		}
		env[e.Name] = true
		validateValueFrom(c, fmt.Sprintf("%s.env[%d]", p, i), e)
	}
	mounts := map[string]bool{}
	for i, m := range ct.VolumeMounts {
		mp := fmt.Sprintf("%s.volumeMounts[%d]", p, i)
		if c.required(mp+".name") && !volumes[m.Name] {
			c.errorf(mp+".name", "volume %q is not defined in spec.volumes", m.Name)
		}
		if c.required(mp + ".mountPath") {
			c.check(mp+".mountPath", m.MountPath, absPath)
			if mounts[m.MountPath] {
				c.errorf(mp+".mountPath", "%q is mounted more than once", m.MountPath)
			}
			mounts[m.MountPath] = true
		}
		if m.SubPath != "" {
			c.check(mp+".subPath", m.SubPath, relPath)
		}
		if secretVolumes[m.Name] {
			if m.SubPath != "" {
				c.errorf(mp+".subPath", "not allowed on a secret volume (a file mounted alone would not see updates)")
			}
			if c.has(mp+".readOnly") && !m.ReadOnly {
				c.errorf(mp+".readOnly", "a secret volume is always read-only; remove readOnly: false")
			}
		}
	}
	validateResources(c, p+".resources", &ct.Resources)
}

func validateResources(c *checker, p string, r *Resources) {
	// A request copied from its limit is reported once, as the limit.
	reqCPU := quantity(c, p+".requests.cpu", r.Requests.CPU, ParseCPU)
	limCPU := quantity(c, p+".limits.cpu", r.Limits.CPU, ParseCPU)
	reqMem := quantity(c, p+".requests.memory", r.Requests.Memory, ParseMemory)
	limMem := quantity(c, p+".limits.memory", r.Limits.Memory, ParseMemory)
	if limCPU == 0 && r.Limits.CPU != "" {
		c.errorf(p+".limits.cpu", "must be greater than 0")
	}
	if limMem == 0 && r.Limits.Memory != "" {
		c.errorf(p+".limits.memory", "must be greater than 0")
	}
	if reqCPU > 0 && limCPU > 0 && reqCPU > limCPU {
		c.errorf(p+".requests.cpu", "request %s is more than the limit %s", r.Requests.CPU, r.Limits.CPU)
	}
	if reqMem > 0 && limMem > 0 && reqMem > limMem {
		c.errorf(p+".requests.memory", "request %s is more than the limit %s", r.Requests.Memory, r.Limits.Memory)
	}
	if g := r.GPU; g != nil {
		c.oneOf(p+".gpu.driver", g.Driver, "any", "nvidia", "amd")
		c.atLeast(p+".gpu.minVRAM_MB", g.MinVRAMMB, 0)
	}
}

// quantity parses a quantity with parse, reporting errors for a value
// written at path; it returns -1 for an empty or invalid value.
func quantity(c *checker, path, s string, parse func(string) (int64, error)) int64 {
	if s == "" {
		return -1
	}
	v, err := parse(s)
	if err != nil {
		if c.has(path) {
			c.errorf(path, "%v", err)
		}
		return -1
	}
	return v
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

// validateNodeByNode checks the settings of a DaemonService's node-by-node
// update: maxParallel and verify, which no other update uses.
func validateNodeByNode(c *checker, typ string, u *UpdateStrategy) {
	const par, ver = "spec.updateStrategy.rolling.maxParallel", "spec.updateStrategy.verify"
	daemon := typ == TypeDaemonService && u.Type == UpdateRolling
	if c.has(par) {
		if !daemon {
			c.errorf(par, "only a DaemonService updated Rolling goes node by node; a Service's pace is maxSurge")
		} else {
			c.atLeast(par, u.Rolling.MaxParallel, 1)
		}
		// Checked, the default is left out of the canonical form, as
		// stopGracePeriodSeconds's is, so writing it changes no spec hash.
		if u.Rolling != nil && u.Rolling.MaxParallel == DefaultMaxParallel {
			u.Rolling.MaxParallel = 0
		}
	}
	if v := u.Verify; v != nil {
		if !daemon {
			c.errorf(ver, "only a DaemonService updated Rolling runs a verification command on each node")
			return
		}
		if c.required(ver+".command") && len(v.Command) == 0 {
			c.errorf(ver+".command", "must name a command to run")
		}
		c.atLeast(ver+".timeoutSeconds", v.TimeoutSeconds, 1)
	}
}

// validateValueFrom checks an env var's valueFrom and that exactly one of
// value and valueFrom is given.
func validateValueFrom(c *checker, p string, e EnvVar) {
	if e.ValueFrom == nil {
		return
	}
	if c.has(p + ".value") {
		c.errorf(p, "exactly one of value and valueFrom")
	}
	ref := e.ValueFrom.SecretKeyRef
	if ref == nil {
		c.errorf(p+".valueFrom.secretKeyRef", "is required")
		return
	}
	rp := p + ".valueFrom.secretKeyRef"
	if c.required(rp + ".name") {
		c.check(rp+".name", ref.Name, dnsLabel)
	}
	if c.required(rp + ".key") {
		c.check(rp+".key", ref.Key, SecretKeyProblem)
	}
}

// secretVolumeNames is the set of the names of a spec's secret volumes.
func secretVolumeNames(vols []Volume) map[string]bool {
	out := map[string]bool{}
	for _, v := range vols {
		if v.Secret != nil {
			out[v.Name] = true
		}
	}
	return out
}
