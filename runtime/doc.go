// Package runtime runs containers for the KAT agent: the ContainerRuntime
// interface and its Podman driver. It knows containers, not
// workloads: the agent maps a workload to a ContainerSpec
// (reconcile/agent/containerspec).
//
// The agent loop depends on ContainerRuntime only. Podman implements it
// through Podman's REST service: the driver starts `podman system service`
// with its configuration's global arguments on a unix socket of its own at
// the first call, starts it again when a call finds it gone, and stops it
// at Close; containers keep running then (conmon is their parent, not the
// service). A podman process costs tens of milliseconds of CPU to start
// and exit, more than many calls do, so one per call would not keep up
// with a node starting its instances. Several agents can share one machine
// by giving each its own storage root, run root and network config
// directory:
//
//	pm := runtime.NewPodman(runtime.PodmanConfig{Root: "/var/lib/kat/n1/storage"})
//	defer pm.Close()
//	id, err := pm.CreateContainer(ctx, runtime.ContainerSpec{
//		Name:   "web-1",
//		Image:  "localhost/kat-base:latest",
//		Args:   []string{"httpd", "-f", "-p", "8080"},
//		Labels: map[string]string{runtime.LabelInstance: "web-1"},
//	})
//	if err == nil {
//		err = pm.StartContainer(ctx, id)
//	}
//
// # Labels
//
// Every container KAT creates carries LabelManaged plus the instance's
// identity (LabelNamespace, LabelWorkload, LabelInstance, LabelSpecHash,
// LabelGeneration, LabelSourceCommit) and its owner's: the node (LabelNode)
// and the cluster's UID (LabelCluster). ListManagedContainers and Events filter
// on them, so an agent that restarts finds and adopts its containers, and
// only its own: the agent asks for its node and its cluster's UID, so the
// containers of another KAT cluster on the same host (test clusters side by
// side, a node initialised again) and containers without LabelCluster (made
// before it existed, or by hand) are never its.
//
// # Restarts and state
//
// Containers are created without a podman restart policy: the agent decides
// every restart. State is observed through Events plus a periodic resync with
// ListManagedContainers; events can be lost.
//
// # Removal
//
// StopAndRemoveContainer and RemoveContainer return only once no process of
// the container is left (ContainerProcesses finds them in /proc: its cgroup,
// libpod-ID, and its conmon). Podman 4.3 can leave some: a podman stop or rm
// killed while it waits out the grace period leaves the container
// "stopping" for good (ContainerStatus.Stopping), and podman rm, even with
// --force, then removes it without stopping it (it stops only a "running"
// container), while its processes run on, holding its published ports. Stop
// such a container with StopContainer before removing it; what is left all
// the same is killed, and the error says so (ErrKilledLeftovers). Stops
// and removals do not go through the service: each is a podman process in a
// process group of its own, so a signal to the caller's group (^C, a
// service manager stopping the agent) never cuts a stop short, and a stop
// under way runs to its end when the agent and its service are gone.
//
// # User namespaces
//
// A container with an IDMap maps uids and gids 0..65535 to HostBase.. on the
// host (--uidmap/--gidmap 0:HostBase:65536); the agent gives every container
// of a workload the same map, a slot of the "containers" range of
// /etc/subuid and /etc/subgid (ReadSubIDRange, SubIDRange.Map). Without one,
// containers run with --userns=auto: podman picks a range from the same
// entries. Either way container root is an unprivileged host uid, never host
// root. Podman 4.3.1 can deadlock when several --userns=auto creates run at
// once, even from different processes, so the driver runs those one at a
// time on the host (a flock of PodmanConfig.AutoUserNSLock); creates with
// explicit maps run in parallel.
//
// # Errors
//
// Errors name the podman command a call stands for and include podman's
// message (an *APIError; the host check, which runs podman info, a
// *CommandError with podman's stderr). They wrap the package's sentinels
// (ErrNotFound, ErrInvalidSpec, ErrExecTimeout, ErrServiceUnavailable, ...)
// where one applies.
package runtime
