/*
Package build turns one commit of a workload's application repository into a
local container image: it clones that exact commit with go-git, runs
`podman build` with the options of the workload's build.kat, tags the result
kat-local/{namespace}_{workload}:{commit12}, and uses a registry as a build
cache when build.kat names one (docs/architecture.md "Builds").

A node agent holds one Builder and asks it for the image of an instance:

	ids, err := runtime.ReadSubIDRange("/etc/subuid", "/etc/subgid", "containers")
	b, err := build.New(build.Config{
		Node:    "node-1",
		WorkDir: "/var/lib/kat/builds",
		Podman:  runtime.NewPodman(runtime.PodmanConfig{}),
		SubIDs:  &ids,    // RUN steps' user namespaces
		Records: records, // where build records go, e.g. etcd
	})
	defer b.Close()
	rec, err := b.Build(ctx, build.Request{
		Namespace: "default", Workload: "web",
		Repository: "https://git.example.com/app.git",
		Commit:     "0123456789abcdef0123456789abcdef01234567",
		Spec:       buildDefinition.Spec,
	})
	// rec.Image is "kat-local/default_web:0123456789ab"

# One build per commit

Build is idempotent: an image that already exists locally is returned at once
(api.Build.Existing). Concurrent requests for the same namespace, workload and
commit share one build; each caller waits for it under its own context, and a
caller that gives up does not stop the build, which runs until it finishes,
reaches Config.Timeout (default 10 minutes) or the Builder is closed. At most
Config.MaxParallel builds (default 2) run at once.

The commit is fetched through gitx, KAT's Git layer, with Request.Auth's
credential files: first the head of Request.Ref alone at depth 1, when the
ref names it still; else the commit alone with depth 1 when the server allows
fetching by hash (GitHub, GitLab, git with
uploadpack.allowReachableSHA1InWant); else every branch and tag in full;
always into a temporary directory under WorkDir/src that is removed after
the build. The .git
directory is not part of the build context. When a build is stopped, the
processes of its RUN step are killed first, so that podman cleans up its
working container.

# Records and logs

Every build (not an existing image) writes its record ([api.Build]) to
Config.Records twice: once in state Building when it starts and once when it
ends (Succeeded or Failed), with the tail of its log. The whole log stays in a file under
WorkDir/logs/{namespace}/{workload}/ (the newest Config.KeepLogs per workload
are kept) and Builder.Log reads it back.

# Failure

A failed build returns a *FailedError (errors.Is(err, ErrFailed)) carrying
the stage that failed and the tail of the log, for a BuildFailed condition.
Invalid requests fail with ErrInvalid before anything is done: retrying them
cannot help. A build context or Dockerfile that leaves the repository, also
through a symbolic link, is refused. Credentials retrying cannot fix (a
malformed file, fields that exclude each other, an SSH host known_hosts does
not list) fail the clone with ErrInvalid too; a credential file that does not
exist yet does not, as it may still be provisioned.

# Cache

With build.kat's cache.registryPath set, the Builder first tries to pull
{registryPath}:{commit12}; on success it tags that image with the kat-local
name and does not build (api.Build.CacheHit). After a build it pushes the image
there; a failed push is a warning in the record, not a failed build.
Registry credentials come from Podman's auth file (Config.AuthFile);
registries listed in Config.InsecureRegistries are used without TLS
verification.

# Housekeeping

After each successful build or cache hit (once its callers have the image),
and on Prune, the Builder keeps the newest Config.KeepImages kat-local images
of the workload (by creation time) and removes older ones, never one that a
container (running or not) uses.

# Limits

RUN steps never run as host root: each runs in a user namespace where
container uids and gids 0-65535 are the workload's slot of the "containers"
sub-id range (Request.UserNSSlot of Config.SubIDs, the map its containers
get), or the range's last slot for a request without one. A node without
that range builds nothing (ErrNoSubIDs names the fix). The image's files
keep the container's ids, as with any image, so they are root's in every
container of the workload.

Podman 4.3 cannot do this itself on the hosts KAT targets: with
--userns-uid-map or --userns=auto the working container's root directory
stays host root's (runc cannot create /run/.containerenv) and what RUN and
COPY write is stored with host uids. So podman build runs with the host's
user namespace and, as its OCI runtime, the wrapper of package usernsrun: a
script in WorkDir that hands each RUN step to the Builder's own program
(which calls usernsrun.Main first in main), which mounts the step's layers
again, idmapped, and gives the container the user namespace before runc
creates it. This needs Podman's overlay storage driver and Linux 5.19 or
later (idmapped overlay layers); the kernel logs "upperdir is in-use" for
each RUN step, whose layer is mounted twice while Podman's own mount of it
stays idle. A RUN step takes about 0.1-0.2 s longer. RUN --mount=type=cache
directories are host root's, so a step cannot write them.

The image tag holds only the app commit: changing build.kat without a new
app commit reuses the existing image.
*/
package build
