package api

import "time"

// Namespace is a namespace (/kat/namespaces/{name}).
type Namespace struct {
	Name      string            `json:"name"`
	UID       string            `json:"uid"`
	Labels    map[string]string `json:"labels,omitempty"`
	CreatedAt time.Time         `json:"createdAt"`
}

// NamespaceView is a namespace as the API returns it: the record with the
// number of its workloads.
type NamespaceView struct {
	Namespace
	Workloads int `json:"workloads"`
}
