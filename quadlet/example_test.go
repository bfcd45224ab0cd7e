package quadlet_test

import (
	"errors"
	"fmt"

	"kat.dws.rip/kat/quadlet"
)

func ExampleParseWorkload() {
	files := map[string][]byte{
		"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: web
spec:
  type: Service
  source:
    image: nginx:1.27
  replicas: 2
  restartPolicy:
    condition: Always
  container:
    env:
      - name: COUNTRY
        value: no
`),
	}
	q, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	spec := q.Workload.Spec
	fmt.Println(q.Namespace(), q.Name(), *spec.Replicas, spec.UpdateStrategy.Type, spec.UpdateStrategy.Rolling.MaxSurge)
	fmt.Println(spec.Container.Env[0].Name, "=", spec.Container.Env[0].Value)

	files["workload.kat"] = []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata:
  name: Web
spec:
  type: Service
  source:
    image: nginx:1.27
  replicas: -1
  restartPolicy:
    condition: Always
  container: {}
`)
	_, err = quadlet.ParseWorkload(files, quadlet.ParseOptions{})
	var list quadlet.ErrorList
	if errors.As(err, &list) {
		for _, e := range list {
			fmt.Println(e)
		}
	}
	// Output:
	// default web 2 Rolling 1
	// COUNTRY = no
	// workload.kat:4: metadata.name: "Web" is not a valid name: use lowercase letters, digits and '-', starting and ending with a letter or digit
	// workload.kat:9: spec.replicas: must be at least 0, got -1
}
