package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/internal/poll/polltest"
	"kat.dws.rip/kat/quadlet"
	"kat.dws.rip/kat/runtime"
	"kat.dws.rip/kat/store/resources"
	"kat.dws.rip/kat/store/storetest"
)

// TestSecretsInContainer runs an agent on real Podman with an instance
// using a secret as an environment variable and as a volume: the
// application (PID 1, after the wrapper) has the variable, the file is
// readable by a non-root user and read-only, the values are on the
// agent's tmpfs only (not in the container's Podman config nor its
// database), and a new version reaches the file in the running container.
func TestSecretsInContainer(t *testing.T) {
	pm, ids := podmanForAgentTest(t)
	mark := randomHex(t)
	node, cluster := "it-secret-"+mark, "cluster-"+mark
	const testLabel = "kat.test"
	// A second workload names no command: its image's entrypoint and cmd
	// run through the wrapper. The image goes after the containers using
	// it (cleanups run last first).
	entryImage := "localhost/kat-entry-test-" + mark + ":latest"
	t.Cleanup(func() {
		if err := pm.RemoveImage(context.Background(), entryImage); err != nil && !errors.Is(err, runtime.ErrImageNotFound) {
			t.Errorf("remove the test image: %v", err)
		}
	})
	t.Cleanup(func() { removeMarked(t, pm, testLabel, mark) })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	// The wrapper runs inside the container: kat-agent, static.
	bin := t.TempDir()
	build := exec.CommandContext(ctx, "go", "build", "-trimpath", "-o", bin, "kat.dws.rip/kat/cmd/kat-agent")
	build.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build kat-agent: %v\n%s", err, out)
	}
	secretsDir := filepath.Join(t.TempDir(), "secrets")
	t.Cleanup(func() {
		if err := exec.Command("umount", secretsDir).Run(); err != nil {
			t.Logf("umount %s: %v", secretsDir, err)
		}
	})

	sentinel := "podman-SENTINEL-" + mark
	src := newFixedSecrets(&api.SecretDelivery{Namespace: "ns1", Name: "db", Version: 1, Values: map[string][]byte{"password": []byte(sentinel + "-1")}})
	repo := resources.New(storetest.New(t))
	slot := int(ids.Slots()/3) + 7
	files := map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: app, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: ` + baseImage + `}
  restartPolicy: {condition: Always}
  container:
    command: ["/bin/sleep", "100000"]
    stopGracePeriodSeconds: 0
    env:
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}
    volumeMounts: [{name: creds, mountPath: /run/secrets/db}]
  volumes: [{name: creds, secret: {secretName: db}}]
`)}
	if _, err := quadlet.ParseWorkload(files, quadlet.ParseOptions{}); err != nil {
		t.Fatal(err)
	}
	a := api.Assignment{InstanceID: "app-" + mark, Node: node, Namespace: "ns1", Workload: "app", SpecHash: "h",
		Generation: 1, Image: baseImage, RestartPolicy: quadlet.RestartAlways, Files: files, UserNSSlot: &slot, CreatedAt: time.Now()}
	podman := func(args ...string) {
		t.Helper()
		if out, err := exec.CommandContext(ctx, "podman", append(pm.GlobalArgs(), args...)...).CombinedOutput(); err != nil {
			t.Fatalf("podman %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	podman("create", "--name", "kat-entry-test-"+mark, baseImage)
	podman("commit", "--quiet", "--change", `ENTRYPOINT ["/bin/sh", "-c"]`, "--change", `CMD ["exec sleep 100001"]`, "kat-entry-test-"+mark, entryImage)
	podman("rm", "kat-entry-test-"+mark)
	entryFiles := map[string][]byte{"workload.kat": []byte(`apiVersion: kat.dws.rip/v1alpha1
kind: Workload
metadata: {name: entry, namespace: ns1}
spec:
  type: Service
  replicas: 1
  source: {image: ` + entryImage + `}
  restartPolicy: {condition: Always}
  container:
    stopGracePeriodSeconds: 0
    env:
      - name: DB_PASSWORD
        valueFrom: {secretKeyRef: {name: db, key: password}}
`)}
	if _, err := quadlet.ParseWorkload(entryFiles, quadlet.ParseOptions{}); err != nil {
		t.Fatal(err)
	}
	entrySlot := slot + 1
	b := api.Assignment{InstanceID: "entry-" + mark, Node: node, Namespace: "ns1", Workload: "entry", SpecHash: "h2",
		Generation: 1, Image: entryImage, RestartPolicy: quadlet.RestartAlways, Files: entryFiles, UserNSSlot: &entrySlot, CreatedAt: time.Now()}
	if _, err := repo.WriteAssignments(ctx, []api.Assignment{a, b}, nil); err != nil {
		t.Fatal(err)
	}
	ag, _, stopAgent := runPodmanAgent(t, AgentConfig{Repo: repo, Node: node, ClusterUID: cluster, Runtime: pm,
		Resync: 500 * time.Millisecond, Tick: 50 * time.Millisecond,
		Secrets: src, SecretsDir: secretsDir, SecretsMount: SecretsTmpfs},
		NewSpecBuilderWithSecrets(node, t.TempDir(), &ids, SecretsLayout{Dir: secretsDir, Agent: filepath.Join(bin, "kat-agent")}), testLabel, mark)
	defer stopAgent()

	var id, entryID string
	polltest.UntilErr(t, 2*time.Minute, "the instances running", func() error {
		for _, is := range ag.Instances() {
			if is.Phase != api.InstanceRunning {
				continue
			}
			switch is.InstanceID {
			case a.InstanceID:
				id = is.ContainerID
			case b.InstanceID:
				entryID = is.ContainerID
			}
		}
		if id == "" || entryID == "" {
			return fmt.Errorf("instances %+v", ag.Instances())
		}
		return nil
	})
	execIn := func(id string, cmd ...string) (string, int) {
		t.Helper()
		res, err := pm.Exec(ctx, id, cmd, 30*time.Second)
		if err != nil {
			t.Fatalf("exec %v: %v", cmd, err)
		}
		return string(res.Output), res.ExitCode
	}
	exec := func(cmd ...string) (string, int) { t.Helper(); return execIn(id, cmd...) }
	// The image's entrypoint and cmd ran, with the variable.
	if env, _ := execIn(entryID, "cat", "/proc/1/environ"); !strings.Contains(env, "DB_PASSWORD="+sentinel+"-1\x00") {
		t.Error("PID 1 of the image's entrypoint lacks DB_PASSWORD with the secret's value")
	}
	if cmdline, _ := execIn(entryID, "cat", "/proc/1/cmdline"); cmdline != "sleep\x00100001\x00" {
		t.Errorf("PID 1 of the container without a command is %q, want the image's entrypoint and cmd (sleep 100001)", cmdline)
	}
	if env, _ := exec("cat", "/proc/1/environ"); !strings.Contains(env, "DB_PASSWORD="+sentinel+"-1\x00") {
		t.Error("PID 1 lacks DB_PASSWORD with the secret's value")
	}
	if cmdline, _ := exec("cat", "/proc/1/cmdline"); !strings.HasPrefix(cmdline, "/bin/sleep\x00") {
		t.Errorf("PID 1 is %q, want the application after the wrapper", cmdline)
	}
	if out, code := exec("su", "-s", "/bin/sh", "nobody", "-c", "cat /run/secrets/db/password"); code != 0 || out != sentinel+"-1" {
		t.Errorf("a non-root user reads the file: exit %d", code)
	}
	if _, code := exec("sh", "-c", "echo x > /run/secrets/db/password"); code == 0 {
		t.Error("the secret file is writable")
	}
	// Nothing of Podman's holds the value: the container's config and the
	// database.
	for _, dir := range []string{"/var/lib/containers/storage/overlay-containers/" + id, "/run/containers/storage/overlay-containers/" + id,
		"/var/lib/containers/storage/overlay-containers/" + entryID, "/run/containers/storage/overlay-containers/" + entryID,
		"/var/lib/containers/storage/libpod"} {
		out, _ := osexec("grep", "-r", "-a", "-l", "-F", sentinel, dir)
		if strings.TrimSpace(out) != "" {
			t.Errorf("the value is in Podman's files: %s", out)
		}
	}

	// A new version reaches the running container's file, in place, once
	// the node's reference names it (the leader writes it).
	src.set(&api.SecretDelivery{Namespace: "ns1", Name: "db", Version: 2, Values: map[string][]byte{"password": []byte(sentinel + "-2")}})
	if _, err := repo.WriteSecretRefs(ctx, []api.SecretRef{{Node: node, Namespace: "ns1", Name: "db", UID: "u", Version: 2}}, nil); err != nil {
		t.Fatal(err)
	}
	polltest.UntilErr(t, 20*time.Second, "the new version in the container", func() error {
		if out, _ := exec("cat", "/run/secrets/db/password"); out != sentinel+"-2" {
			return fmt.Errorf("the file holds version 1 still (%d bytes)", len(out))
		}
		return nil
	})
	if c, err := pm.InspectContainer(ctx, id); err != nil || c.ID != id {
		t.Errorf("the container changed: %v", err)
	}
}

func osexec(name string, args ...string) (string, error) {
	var out bytes.Buffer
	cmd := exec.Command(name, args...)
	cmd.Stdout = &out
	err := cmd.Run()
	return out.String(), err
}
