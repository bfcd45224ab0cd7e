package quadlet

// Namespace is the content of namespace.kat.
type Namespace struct {
	// APIVersion must be APIVersion.
	APIVersion string `json:"apiVersion" yaml:"apiVersion"`
	// Kind must be KindNamespace.
	Kind string `json:"kind" yaml:"kind"`
	// Metadata.Name is required; Metadata.Namespace must be empty.
	Metadata ObjectMeta `json:"metadata" yaml:"metadata"`
}

// ParseNamespace parses and validates a Namespace file. On failure the error
// is an ErrorList.
func ParseNamespace(file string, data []byte) (*Namespace, error) {
	doc, errs := parseDocument(file, data)
	if errs != nil {
		return nil, errs.err()
	}
	var ns Namespace
	c := doc.checker(&errs)
	if doc.kind == KindNamespace {
		doc.decode(&ns)
		errs = append(errs, doc.errs...)
	}
	c.checkHeader(KindNamespace)
	if doc.kind == KindNamespace && c.required("metadata") {
		validateMeta(c, ns.Metadata)
		if ns.Metadata.Namespace != "" {
			c.errorf("metadata.namespace", "must not be set for a Namespace")
		}
	}
	if err := errs.err(); err != nil {
		return nil, err
	}
	return &ns, nil
}
