package quadlet

import (
	"fmt"
	"maps"
	"strconv"

	"go.yaml.in/yaml/v3"
)

// WithNodeSelector returns files with key: value added to workload.kat's
// spec.nodeSelector, the rest of the file as it was (comments kept). A
// detached node pins the workloads applied to it this way
// (docs/detached.md).
func WithNodeSelector(files map[string][]byte, key, value string) (map[string][]byte, error) {
	return editSpec(files, func(spec *yaml.Node) {
		sel := mappingValue(spec, "nodeSelector")
		if sel.Kind != yaml.MappingNode {
			*sel = yaml.Node{Kind: yaml.MappingNode}
		}
		setScalar(sel, key, value, "")
	})
}

// WithReplicas returns files with workload.kat's spec.replicas set to n,
// the rest of the file as it was. The instance template does not cover the
// replica count, so the instances of files keep matching.
func WithReplicas(files map[string][]byte, n int) (map[string][]byte, error) {
	return editSpec(files, func(spec *yaml.Node) {
		setScalar(spec, "replicas", strconv.Itoa(n), "!!int")
	})
}

// editSpec applies edit to the spec mapping of workload.kat (made when
// absent) and returns a copy of files with the file written again.
func editSpec(files map[string][]byte, edit func(spec *yaml.Node)) (map[string][]byte, error) {
	var doc yaml.Node
	if err := yaml.Unmarshal(files[WorkloadFile], &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", WorkloadFile, err)
	}
	if doc.Kind != yaml.DocumentNode || len(doc.Content) != 1 || doc.Content[0].Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s: not a YAML mapping", WorkloadFile)
	}
	spec := mappingValue(doc.Content[0], "spec")
	if spec.Kind != yaml.MappingNode {
		*spec = yaml.Node{Kind: yaml.MappingNode}
	}
	edit(spec)
	b, err := yaml.Marshal(&doc)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", WorkloadFile, err)
	}
	out := maps.Clone(files)
	out[WorkloadFile] = b
	return out, nil
}

// mappingValue returns the value node of key in mapping m, appending an
// empty one when m has no such key.
func mappingValue(m *yaml.Node, key string) *yaml.Node {
	for i := 0; i+1 < len(m.Content); i += 2 {
		if m.Content[i].Value == key {
			return m.Content[i+1]
		}
	}
	v := &yaml.Node{}
	m.Content = append(m.Content, &yaml.Node{Kind: yaml.ScalarNode, Value: key}, v)
	return v
}

// setScalar sets key of mapping m to the scalar value (of tag, or a string
// when tag is empty).
func setScalar(m *yaml.Node, key, value, tag string) {
	v := mappingValue(m, key)
	style := yaml.Style(0)
	if tag == "" {
		tag, style = "!!str", yaml.DoubleQuotedStyle
	}
	*v = yaml.Node{Kind: yaml.ScalarNode, Tag: tag, Value: value, Style: style}
}
