package quadlet

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"maps"
	"path"
	"slices"
	"strings"
)

// Quadlet is one parsed, defaulted and validated workload directory.
type Quadlet struct {
	// Workload is the content of workload.kat.
	Workload Workload
	// LoadBalancer is the VirtualLoadBalancer, nil if absent.
	LoadBalancer *VirtualLoadBalancer
	// Job is the JobDefinition, nil if absent.
	Job *JobDefinition
	// Build is the BuildDefinition, nil if absent.
	Build *BuildDefinition
	// Files are the raw files exactly as given, by base name.
	Files map[string][]byte
}

// ParseOptions tunes ParseWorkload.
type ParseOptions struct {
	// DefaultNamespace is the namespace of a workload whose workload.kat
	// names none. Empty means DefaultNamespace ("default").
	DefaultNamespace string
}

// Name returns the workload's name.
func (q *Quadlet) Name() string { return q.Workload.Metadata.Name }

// Namespace returns the workload's namespace.
func (q *Quadlet) Namespace() string { return q.Workload.Metadata.Namespace }

// CanonicalJSON returns the defaulted documents of q as one JSON object keyed
// by kind ("Workload", "VirtualLoadBalancer", "JobDefinition",
// "BuildDefinition"), with object keys sorted and no insignificant white
// space. Inputs that differ only in key order, comments, quoting or
// explicitly written defaults have the same canonical JSON.
func (q *Quadlet) CanonicalJSON() []byte {
	docs := map[string]any{KindWorkload: q.Workload}
	if q.LoadBalancer != nil {
		docs[KindVirtualLoadBalancer] = q.LoadBalancer
	}
	if q.Job != nil {
		docs[KindJobDefinition] = q.Job
	}
	if q.Build != nil {
		docs[KindBuildDefinition] = q.Build
	}
	return canonicalJSON(docs)
}

// SpecHash returns the lowercase hex SHA-256 of q.CanonicalJSON(): 64
// characters that change exactly when the meaning of the workload changes.
func (q *Quadlet) SpecHash() string {
	sum := sha256.Sum256(q.CanonicalJSON())
	return hex.EncodeToString(sum[:])
}

// canonicalJSON encodes v with every object's keys sorted.
func canonicalJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("quadlet: encode canonical JSON: %v", err)) // the resource types always encode
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var generic any
	if err := dec.Decode(&generic); err != nil {
		panic(fmt.Sprintf("quadlet: decode canonical JSON: %v", err))
	}
	var out bytes.Buffer
	enc := json.NewEncoder(&out)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(generic); err != nil {
		panic(fmt.Sprintf("quadlet: encode canonical JSON: %v", err))
	}
	return bytes.TrimSuffix(out.Bytes(), []byte("\n"))
}

// ParseWorkload parses, defaults and validates the files of one workload
// directory, keyed by base name. workload.kat must hold the Workload; every
// other file must end in ".kat" and hold one of VirtualLoadBalancer,
// JobDefinition or BuildDefinition, at most one of each, whatever its name.
//
// On failure the error is an ErrorList naming every problem found.
func ParseWorkload(files map[string][]byte, opts ParseOptions) (*Quadlet, error) {
	namespace := opts.DefaultNamespace
	if namespace == "" {
		namespace = DefaultNamespace
	}
	q := &Quadlet{Files: make(map[string][]byte, len(files))}
	for name, data := range files {
		q.Files[name] = bytes.Clone(data)
	}
	var (
		errs       ErrorList
		complete   = true // every file was read and dispatched
		docs       = map[string]*document{}
		firstFiles = map[string]string{} // kind -> file that holds it
	)
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if msg := FileNameProblem(name); msg != "" {
			errs = append(errs, &FieldError{File: name, Message: msg})
			complete = false
			continue
		}
		doc, perrs := parseDocument(name, files[name])
		if perrs != nil {
			errs = append(errs, perrs...)
			complete = false
			continue
		}
		kind := doc.kind
		c := doc.checker(&errs)
		switch {
		case name == WorkloadFile && kind != KindWorkload:
			c.errorf("kind", "%s must hold the Workload (kind: %s), got %s", WorkloadFile, KindWorkload, describeKind(kind))
			complete = false
		case kind == KindWorkload && name != WorkloadFile:
			c.errorf("kind", "the Workload belongs in %s; a workload directory holds exactly one", WorkloadFile)
		case kind == KindNamespace || kind == KindClusterConfiguration:
			c.errorf("kind", "a %s does not belong in a workload directory", kind)
		case kind == KindSecret:
			c.errorf("kind", "a Secret does not belong in a workload directory: encrypt it with katcall secret seal into NAME%s outside workload directories", SecretSuffixes[0])
		case kind == KindVirtualLoadBalancer || kind == KindJobDefinition || kind == KindBuildDefinition || kind == KindWorkload:
			if first, dup := firstFiles[kind]; dup {
				c.errorf("kind", "a workload has at most one %s, and %s already holds it", kind, first)
				continue
			}
			firstFiles[kind] = name
			docs[kind] = doc
		case kind == "":
			c.errorf("kind", "is required: one of %s, %s, %s or %s",
				KindWorkload, KindVirtualLoadBalancer, KindJobDefinition, KindBuildDefinition)
			complete = false
		default:
			c.errorf("kind", "unknown kind %q: a workload directory holds %s, %s, %s or %s", kind,
				KindWorkload, KindVirtualLoadBalancer, KindJobDefinition, KindBuildDefinition)
			complete = false
		}
	}
	if _, ok := files[WorkloadFile]; !ok {
		errs = append(errs, &FieldError{File: WorkloadFile, Message: "file is missing: every workload directory needs a workload.kat holding the Workload"})
	}

	// decode fills v from the document holding kind and returns the
	// checker for validating it.
	decode := func(kind string, v any) *checker {
		doc := docs[kind]
		doc.decode(v)
		errs = append(errs, doc.errs...)
		return doc.checker(&errs)
	}
	var wc, lbc, jc, bc *checker
	if docs[KindWorkload] != nil {
		wc = decode(KindWorkload, &q.Workload)
		defaultWorkload(&q.Workload, wc, namespace)
		validateWorkload(wc, &q.Workload)
	}
	if docs[KindVirtualLoadBalancer] != nil {
		q.LoadBalancer = &VirtualLoadBalancer{}
		lbc = decode(KindVirtualLoadBalancer, q.LoadBalancer)
		defaultLoadBalancer(q.LoadBalancer, lbc)
		validateLoadBalancer(lbc, q.LoadBalancer)
	}
	if docs[KindJobDefinition] != nil {
		q.Job = &JobDefinition{}
		jc = decode(KindJobDefinition, q.Job)
		defaultJob(q.Job, jc)
		validateJob(jc, q.Job)
	}
	if docs[KindBuildDefinition] != nil {
		q.Build = &BuildDefinition{}
		bc = decode(KindBuildDefinition, q.Build)
		defaultBuild(q.Build)
		validateBuild(bc, q.Build)
	}
	if wc != nil {
		crossCheck(q, wc, lbc, jc, bc, complete)
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return q, nil
}

// crossCheck applies the rules that tie the files of a workload together.
// Rules about a missing file are skipped when some file could not be read,
// since that file may be the one missing.
func crossCheck(q *Quadlet, wc, lbc, jc, bc *checker, complete bool) {
	s := &q.Workload.Spec
	if wc.failed("spec.type") || wc.failed("spec.source") {
		return
	}
	typ := s.Type
	validType := typ == TypeService || typ == TypeJob || typ == TypeDaemonService
	if lbc != nil && validType && typ == TypeJob {
		lbc.errorf("kind", "a VirtualLoadBalancer is only allowed for workloads of type Service or DaemonService, and this workload is a %s", typ)
	}
	if v, ok := q.Workload.Metadata.Labels[LabelIngressProxy]; ok && validType {
		checkIngressProxy(q, wc, v)
	}
	switch {
	case jc != nil && validType && typ != TypeJob:
		jc.errorf("kind", "a JobDefinition is only allowed for workloads of type Job, and this workload is a %s", typ)
	case jc == nil && typ == TypeJob && complete:
		wc.errorf("spec.type", "a Job needs a JobDefinition file (job.kat)")
	}
	switch {
	case bc != nil && s.Source.Git == nil && wc.has("spec.source"):
		bc.errorf("kind", "a BuildDefinition is only allowed when spec.source.git is set in %s", WorkloadFile)
	case bc == nil && s.Source.Git != nil && complete:
		wc.errorf("spec.source.git", "building from git needs a BuildDefinition file (build.kat)")
	}
}

// FileNameProblem says what is wrong with the name of a file in a workload
// directory, or "" when nothing is.
func FileNameProblem(name string) string {
	switch {
	case name == "" || name == "." || name == ".." || strings.ContainsAny(name, "/\\\x00"):
		return fmt.Sprintf("%q is not a plain file name", name)
	case IsSecretFile(name):
		return "is not a .kat file; secrets belong outside workload directories"
	case path.Ext(name) != ".kat" || name == ".kat":
		return "is not a .kat file; a workload directory holds only .kat files"
	}
	return ""
}

func describeKind(kind string) string {
	if kind == "" {
		return "no kind"
	}
	return fmt.Sprintf("kind %q", kind)
}
