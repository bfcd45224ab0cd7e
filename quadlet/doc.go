/*
Package quadlet is KAT's resource model: it reads, parses, defaults and
validates Quadlet files (docs/quadlet-reference.md) and gives each
workload a canonical form and a spec hash.

A workload is a directory of YAML files ending in ".kat": workload.kat holds
the Workload, and optional files hold its VirtualLoadBalancer, JobDefinition
and BuildDefinition. LoadDir reads and parses such a directory:

	q, err := quadlet.LoadDir("apps/web", quadlet.ParseOptions{})
	if err != nil {
		var list quadlet.ErrorList
		if errors.As(err, &list) {
			for _, e := range list {
				fmt.Println(e) // workload.kat:12: spec.replicas: must be at least 0, got -1
			}
		}
		return err
	}
	fmt.Println(q.Namespace(), q.Name(), q.SpecHash())

ParseNamespace and ParseClusterConfiguration parse namespace.kat and
cluster.kat.

# Parsing

Parsing is strict. Unknown fields, duplicate keys, values of the wrong type,
more than one YAML document in a file, an empty file and a wrong apiVersion
(it must be APIVersion) or kind are errors. Numbers must be plain decimals,
booleans true or false. String fields take any scalar exactly as written, so
the YAML 1.1 words on, no and yes and numbers like 0755 stay text: an
environment variable written "value: on" holds "on". YAML anchors and aliases
work; merge keys (<<) do not.

The files of a workload directory are dispatched on their kind, not their
name, except that workload.kat must hold the Workload. A Namespace or
ClusterConfiguration in a workload directory is an error.

# Errors

The parsers report every problem they find, not just the first, as an
ErrorList of *FieldError sorted by file and line. Each names the file, the
line, the path of the field and what is wrong:

	workload.kat:14: spec.container.volumeMounts[0].name: volume "data" is not defined in spec.volumes

When a field is missing, the line is that of its nearest enclosing field.

# Defaults

Parsing fills in the defaults, documented on each field, so that
consumers never apply them again. A field written with its default value and
a field left out are the same after parsing; explicitly written values are
never replaced, so "backoffLimit: 0" stays 0 and "completions: 0" is an
error rather than 1.

# Canonical form and spec hash

Quadlet.CanonicalJSON encodes the defaulted documents keyed by kind with
sorted keys and no white space; Quadlet.SpecHash is its SHA-256. Two
directories that differ only in formatting, comments, key order, file names
or explicitly written defaults have the same hash; any change of meaning
changes it.

# Reading directories and archives

ReadDir and ReadArchive return the raw files of a directory or of a
gzip-compressed tar archive, enforcing Limits (exceeding them wraps
ErrTooLarge). They accept only regular .kat files at the top level and refuse
links, devices, sub-directories and, in archives, absolute names and ".."
elements. ReadDir skips hidden entries (.git, .gitkeep) and editor backups
ending in "~". WriteArchive writes a deterministic archive. Limits.Check
applies the same limits to files gathered elsewhere, such as from a Git
tree.

# Quantities and schedules

ParseCPU and ParseMemory read resource quantities ("500m", "64Mi");
ParseSchedule reads a job's cron schedule.
*/
package quadlet
