package quadlet

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEditsKeepTheRest: a nodeSelector entry and a replica count are set
// in workload.kat, comments and other fields kept, and the result parses
// to the same spec but for them.
func TestEditsKeepTheRest(t *testing.T) {
	dir := filepath.Join("testdata", "valid", "web")
	files := map[string][]byte{}
	for _, f := range []string{WorkloadFile, "VirtualLoadBalancer.kat"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		files[f] = b
	}
	before, err := ParseWorkload(files, ParseOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pinned, err := WithNodeSelector(files, "kat.dws.rip/nodeName", "laptop")
	if err != nil {
		t.Fatal(err)
	}
	scaled, err := WithReplicas(pinned, 1)
	if err != nil {
		t.Fatal(err)
	}
	q, err := ParseWorkload(scaled, ParseOptions{})
	if err != nil {
		t.Fatalf("edited workload.kat does not parse: %v\n%s", err, scaled[WorkloadFile])
	}
	sel := q.Workload.Spec.NodeSelector
	if sel["kat.dws.rip/nodeName"] != "laptop" || sel["zone"] != "eu-1" || len(sel) != 2 {
		t.Fatalf("nodeSelector %v", sel)
	}
	if r := q.Workload.Spec.Replicas; r == nil || *r != 1 {
		t.Fatalf("replicas %v, want 1", r)
	}
	if !strings.Contains(string(scaled[WorkloadFile]), "# A web service") {
		t.Fatalf("comment lost:\n%s", scaled[WorkloadFile])
	}
	if string(files[WorkloadFile]) == string(scaled[WorkloadFile]) {
		t.Fatal("the edit changed the caller's map")
	}
	q.Workload.Spec.NodeSelector, q.Workload.Spec.Replicas = before.Workload.Spec.NodeSelector, before.Workload.Spec.Replicas
	if q.SpecHash() != before.SpecHash() {
		t.Fatal("the edit changed more than the nodeSelector and the replicas")
	}

	// A workload.kat without nodeSelector gets one.
	bare := map[string][]byte{WorkloadFile: []byte("apiVersion: kat.dws.rip/v1alpha1\nkind: Workload\nmetadata: {name: job}\nspec: {type: Service, source: {image: busybox:1}, replicas: 1, restartPolicy: {condition: Always}, container: {name: c}}\n")}
	p, err := WithNodeSelector(bare, "kat.dws.rip/nodeName", "n1")
	if err != nil {
		t.Fatal(err)
	}
	if q, err := ParseWorkload(p, ParseOptions{}); err != nil || q.Workload.Spec.NodeSelector["kat.dws.rip/nodeName"] != "n1" {
		t.Fatalf("pinned flow-style workload: %v %v\n%s", q, err, p[WorkloadFile])
	}
	if _, err := WithReplicas(map[string][]byte{WorkloadFile: []byte("- a list")}, 1); err == nil {
		t.Fatal("a workload.kat that is not a mapping was edited")
	}
}
