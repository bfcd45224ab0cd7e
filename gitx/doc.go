/*
Package gitx is KAT's one Git layer: the go-git transport that config-repo
sources (gitsync), the leader's app-repo ref resolution ([ResolveAppRef])
and build clones (build) share, the one credential type, SSH host-key
checking against a known_hosts file, and the removal of credentials from URLs
before they reach an error or a log.

What is KAT's own stays with its package: gitsync walks and diffs trees and
plans what to write, build checks a commit out for a build. Both come here to
talk to a remote.

A minimal use, resolving a branch without fetching anything and fetching
one commit into a bare repository:

	auth := api.GitAuth{TokenFile: "/etc/kat/git.token"}
	head, err := gitx.Resolve(ctx, url, auth, gitx.Ref{Branch: "main"})
	repo, err := gitx.Open(dir, url, auth) // reopened as it is, or made anew
	defer repo.Close()
	shallow, err := repo.FetchCommit(ctx, head)
	commit, err := repo.Git.CommitObject(head)

# Credentials

[api.GitAuth] (the record a source and the --app-repo-* flags share) names
files, never secrets: a token file, a "user:password" file, or an SSH private
key with the known_hosts file its server's host key is checked against. [AuthMethod] reads them at every call, so
a rotated secret is picked up, and turns them into a go-git
transport.AuthMethod; every operation of this package calls it. [CheckAuth]
checks the combination of fields against a URL without reading anything.

Errors name the parameter (auth.tokenFile, auth.sshKeyFile, ...) and what is
wrong, never a file's content. Those caused by the input (fields that exclude
each other, a file that is missing, empty or malformed, an unusable key, a
host absent from known_hosts) match [ErrInvalid], without saying so in their
message; a missing file also matches fs.ErrNotExist, since a caller may
prefer to wait for a secret still being provisioned.

# SSH

An ssh:// or scp-like URL needs Auth.SSHKeyFile and Auth.KnownHostsFile;
the user is GitAuth.Username, else the URL's, else git. The server's host key
must be one known_hosts lists for the URL's host and port, and only the key
types known_hosts holds for that host are asked for. Nothing
is ever taken from ~/.ssh (keys, known_hosts or ssh_config) or from an
ssh-agent: this package turns off go-git's reading of ~/.ssh/config for the
whole process.

# Redaction

[RedactURL] removes the credentials of one URL: the whole user information of
an http(s) URL (which may be a token, https://TOKEN@host/...), the password
of any other. A [Redactor] does the same to a message: it strips credentials
from every URL in it and replaces the password of its own URL wherever it
appears, plain or escaped. Every error of this package says what was being
done with the redacted URL and has been through the Redactor; errors.Is and
errors.As still see the whole chain.

# Transport

[ListRefs] asks a remote for its refs, like git ls-remote, with annotated tags
peeled; [Resolve] picks the commit a [Ref] (branch, tag, short or full commit,
or the default branch) names from them, or fails with [ErrRefNotFound].

A [Repo] is a local repository in a filesystem storage (bare, or with a work
tree for a checkout) with one remote, origin. [Open] reopens one or makes it
anew; [Init] makes a new one. [Repo.Fetch] fetches refspecs, at a depth or in
full. [Repo.FetchCommit] fetches one commit at depth 1 when the server serves
commits by hash (uploadpack.allowReachableSHA1InWant, as GitHub does) and
otherwise falls back to every branch and tag in full; a commit that is still
missing is [ErrCommitNotFound]. go-git has no timeout of its own: every remote
operation takes a context, and an error of one that ended with its context
matches the context's error.
*/
package gitx
