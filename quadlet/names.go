package quadlet

// IsDNSLabel reports whether s is a valid name for a workload, namespace,
// node or volume: an RFC 1123 label of lowercase letters, digits and '-', at
// most 63 characters, starting and ending with a letter or digit.
func IsDNSLabel(s string) bool { return dnsLabel(s) == "" }

// DNSLabelProblem says what keeps s from being a DNS label (see
// IsDNSLabel), or "" when it is one.
func DNSLabelProblem(s string) string { return dnsLabel(s) }

// LabelKeyProblem says what is wrong with a label key (of a node, or of a
// nodeSelector), or "" when it is valid.
func LabelKeyProblem(k string) string { return mapKey(k) }
