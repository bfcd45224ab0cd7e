// Package usernsrun is the OCI runtime wrapper of builds, a program of its
// own that Podman runs: package build runs every RUN step of a build through
// it (podman --runtime), and it puts the step's container into a user
// namespace before the real OCI runtime (runc) creates it.
//
// Podman 4.3 cannot do that itself on these hosts: with --userns-uid-map or
// --userns=auto, containers/storage 1.43 leaves the working container's
// root directory owned by host root (runc then fails to create
// /run/.containerenv, and no RUN step could write to /), and it stores
// what RUN and COPY write with host uids (2147483647...) instead of the
// container's. So podman build runs with the host's user namespace, and
// for each RUN step the wrapper
//
//  1. mounts the step's root filesystem again: the same overlay layers, each
//     idmapped (container uid u is host uid base+u), so that container root
//     owns what host root owns in the image, and what the step writes lands
//     in the layer with the container's uids;
//  2. adds a user namespace with that map to the container's config;
//  3. execs the real runtime; after "delete", it undoes its mounts and gives
//     the whiteouts overlayfs made to root.
//
// COPY and ADD work as without it (podman writes those itself, as host
// root, with the container's uids). Idmapped overlay layers need Linux 5.19
// or later.
//
// The wrapper is a shell script that hands create and delete to this
// program, started as its helper (kat-build-userns, a symbolic link to the
// program), and execs the real runtime for the rest: Podman asks for the
// state of a running step every 100ms, and a shell starts far faster than
// this program.
//
// A program whose builds run RUN steps (kat-agent, package build's tests)
// calls [Main] first thing in main: when it was started as the helper, Main
// runs the step and exits. The builder installs the wrapper and the helper in
// its work directory ([Install]), checks that the program serves as the
// helper ([Check]) and passes each build the map and the runtime in the
// environment ([Env]):
//
//	func main() {
//		usernsrun.Main() // returns at once unless started as the helper
//		// ...
//	}
//
//	wrapper, helper, err := usernsrun.Install(workDir)
//	err = usernsrun.Check(ctx, helper)
//	cmd.Env = append(cmd.Env, usernsrun.Env(hostBase, 65536, "/usr/bin/runc", overlayHome)...)
//	// podman --runtime wrapper build ...
package usernsrun
