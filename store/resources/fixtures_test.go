package resources_test

import (
	"fmt"
	"testing"

	"kat.dws.rip/kat/quadlet"
)

// service returns a valid Service Quadlet named name in ns with the given
// replica count.
func service(t testing.TB, ns, name string, replicas int) *quadlet.Quadlet {
	t.Helper()
	q, err := quadlet.ParseWorkload(map[string][]byte{
		"workload.kat": fmt.Appendf(nil, `apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: %s
  namespace: %s
spec:
  type: Service
  source:
    image: localhost/kat-base:latest
  replicas: %d
  restartPolicy:
    condition: Always
  container:
    command: ["/bin/sh", "-c", "sleep 3600"]
`, name, ns, replicas),
	}, quadlet.ParseOptions{})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return q
}

// withLoadBalancer adds a VirtualLoadBalancer.kat to q's files and reparses.
func withLoadBalancer(t testing.TB, q *quadlet.Quadlet) *quadlet.Quadlet {
	t.Helper()
	files := map[string][]byte{}
	for k, v := range q.Files {
		files[k] = v
	}
	files["VirtualLoadBalancer.kat"] = []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: VirtualLoadBalancer
spec:
  ports:
    - name: http
      containerPort: 8080
`)
	out, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		t.Fatalf("fixture: %v", err)
	}
	return out
}
