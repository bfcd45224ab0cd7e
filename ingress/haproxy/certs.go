package haproxy

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// Certificate is a certificate HAProxy serves, by SNI, for Hosts. Its
// PEM (chain and key) leaves only in the command that loads it: the type
// prints as its fingerprint and hosts, whatever prints it.
type Certificate struct {
	// Fingerprint is the SHA-256 of the leaf, hex.
	Fingerprint string
	// Hosts are the SNI names it is selected for, sorted.
	Hosts []string
	pem   []byte
}

// NewCertificate returns the certificate of chainPEM (leaf first) and
// keyPEM for hosts.
func NewCertificate(fingerprint string, hosts []string, chainPEM, keyPEM []byte) Certificate {
	h := slices.Clone(hosts)
	slices.Sort(h)
	// The runtime API ends a payload at its first empty line: none inside.
	var b []byte
	for _, part := range [][]byte{chainPEM, keyPEM} {
		for line := range bytes.Lines(part) {
			if len(bytes.TrimSpace(line)) > 0 {
				b = append(append(b, bytes.TrimRight(line, "\r\n")...), '\n')
			}
		}
	}
	return Certificate{Fingerprint: fingerprint, Hosts: slices.Compact(h), pem: b}
}

// String names the certificate by fingerprint and hosts.
func (c Certificate) String() string {
	return "certificate " + c.Fingerprint + " for " + strings.Join(c.Hosts, " ")
}

// GoString is String.
func (c Certificate) GoString() string { return c.String() }

// Format writes String for every verb.
func (c Certificate) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(c.String())) }

// Name is what HAProxy stores it by: "/kat/ID.pem", ID derived from the
// fingerprint and the hosts, so another certificate or host list is
// another name and is loaded beside the old one before the old one goes.
func (c Certificate) Name() string {
	sum := sha256.Sum256([]byte(c.Fingerprint + " " + strings.Join(c.Hosts, " ")))
	return certPrefix + hex.EncodeToString(sum[:8]) + ".pem"
}

// certPrefix starts the names of the certificates KAT loads.
const certPrefix = "/kat/"

// TLSObserved is HAProxy's TLS state: the certificates KAT loaded (by
// Name), those listed in the crt-list (so served) with their SNI hosts,
// and the entries of the redirect and ACME maps.
type TLSObserved struct {
	Loaded    map[string]bool
	Listed    map[string][]string
	TLS, ACME map[string]string
}

// ObserveTLS reads the TLS state of the proxy whose run directory is dir
// (as it sees it).
func (c Client) ObserveTLS(ctx context.Context, dir string) (TLSObserved, error) {
	o := TLSObserved{}
	out, err := c.Run(ctx, "show ssl cert")
	if err != nil {
		return o, err
	}
	loaded, err := parseNames(out, "show ssl cert")
	if err != nil {
		return o, err
	}
	o.Loaded = map[string]bool{}
	for name := range loaded {
		o.Loaded[name] = true
	}
	if out, err = c.Run(ctx, "show ssl crt-list "+dir+"/"+CertList); err != nil {
		return o, err
	}
	if o.Listed, err = parseNames(out, "show ssl crt-list"); err != nil {
		return o, err
	}
	if o.TLS, err = c.showMap(ctx, dir+"/"+TLSMap); err != nil {
		return o, err
	}
	if o.ACME, err = c.showMap(ctx, dir+"/"+ACMEMap); err != nil {
		return o, err
	}
	return o, nil
}

// parseNames returns the KAT certificate names (certPrefix) that start
// the lines of a "show ssl cert" or "show ssl crt-list FILE" answer, with
// the words that follow them on the line (a crt-list entry's SNI hosts).
func parseNames(out, what string) (map[string][]string, error) {
	names := map[string][]string{}
	for line := range strings.Lines(out) {
		line = strings.TrimSpace(line)
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		if strings.Contains(line, "-----") {
			return nil, fmt.Errorf("parse %s: unexpected line", what)
		}
		f := strings.Fields(line)
		if strings.HasPrefix(f[0], certPrefix) {
			names[f[0]] = append(names[f[0]], f[1:]...)
		}
	}
	return names, nil
}

// TLSApplied is what ApplyTLS left HAProxy serving.
type TLSApplied struct {
	// Certificates is the number of KAT certificates listed.
	Certificates int
	// Tokens are the ACME tokens answered, sorted.
	Tokens []string
	// Commands is the number of commands run.
	Commands int
}

// ApplyTLS brings the proxy whose run directory is dir to serve want (by
// SNI) and answer challenges (ACME token to key authorization). Each new
// certificate is loaded in memory and listed before any redirect names its
// hosts; a certificate HAProxy refuses is never listed, and the one it
// would have replaced stays served. The error joins the refusals, each
// naming its command without the payload.
func (c Client) ApplyTLS(ctx context.Context, dir string, want []Certificate, challenges map[string]string) (TLSApplied, error) {
	var a TLSApplied
	o, err := c.ObserveTLS(ctx, dir)
	if err != nil {
		return a, err
	}
	load := PlanCertificates(want, o, dir)
	listed := maps.Clone(o.Listed)
	var loadErrs []error
	for _, g := range load {
		name := strings.TrimPrefix(g[len(g)-2], "commit ssl cert ")
		if _, err := c.ExecGroups(ctx, [][]string{g}); err != nil {
			loadErrs = append(loadErrs, err)
			// HAProxy holds one transaction at a time: end the refused
			// one (there may be none: the answer does not matter).
			_, _ = c.Run(ctx, "abort ssl cert "+name)
			continue
		}
		listed[name] = certByName(want, name).Hosts
	}
	loadErr := errors.Join(loadErrs...)
	mapCmds := PlanTLSMaps(want, listed, challenges, o, dir)
	mapErr := c.Exec(ctx, mapCmds)
	remove := PlanRemovals(want, listed, o.Loaded, dir)
	okr, removeErr := c.ExecGroups(ctx, remove)
	for i, g := range remove {
		if okr[i] {
			delete(listed, strings.TrimPrefix(g[len(g)-1], "del ssl cert "))
		}
	}
	for _, g := range append(load, remove...) {
		a.Commands += len(g)
	}
	a.Commands += len(mapCmds)
	a.Certificates = len(listed)
	a.Tokens = slices.Sorted(maps.Keys(challenges))
	return a, errors.Join(loadErr, mapErr, removeErr)
}

func certByName(want []Certificate, name string) Certificate {
	for _, c := range want {
		if c.Name() == name {
			return c
		}
	}
	return Certificate{}
}

// PlanCertificates returns the command groups that load each certificate
// of want that o does not list: new, set with the PEM as payload, commit,
// then listed in the crt-list with its hosts as SNI filters. Run them with
// ExecGroups: a group stops at its first refusal, so a certificate HAProxy
// cannot load is never listed. It is pure.
func PlanCertificates(want []Certificate, o TLSObserved, dir string) [][]string {
	list := dir + "/" + CertList
	var load [][]string
	seen := map[string]bool{}
	for _, c := range want {
		name := c.Name()
		if seen[name] {
			continue
		}
		seen[name] = true
		if _, ok := o.Listed[name]; ok {
			continue
		}
		var g []string
		if !o.Loaded[name] {
			g = append(g, "new ssl cert "+name)
		}
		g = append(g, "set ssl cert "+name+" <<\n"+string(c.pem), "commit ssl cert "+name,
			"add ssl crt-list "+list+" <<\n"+name+" "+strings.Join(c.Hosts, " ")+"\n")
		load = append(load, g)
	}
	return load
}

// PlanRemovals returns the command groups that remove the KAT
// certificates loaded or listed that want does not name, except one that
// serves a host of want whose new certificate is not listed (HAProxy
// refused it): that one stays served until its replacement is. It is pure.
func PlanRemovals(want []Certificate, listed map[string][]string, loaded map[string]bool, dir string) [][]string {
	wanted := map[string]bool{}
	unserved := map[string]bool{} // hosts whose wanted certificate is not listed
	for _, c := range want {
		wanted[c.Name()] = true
		if _, ok := listed[c.Name()]; !ok {
			for _, h := range c.Hosts {
				unserved[h] = true
			}
		}
	}
	names := maps.Clone(loaded)
	if names == nil {
		names = map[string]bool{}
	}
	for name := range listed {
		names[name] = true
	}
	var remove [][]string
	for _, name := range slices.Sorted(maps.Keys(names)) {
		if wanted[name] || slices.ContainsFunc(listed[name], func(h string) bool { return unserved[h] }) {
			continue
		}
		var g []string
		if _, ok := listed[name]; ok {
			g = append(g, "del ssl crt-list "+dir+"/"+CertList+" "+name)
		}
		remove = append(remove, append(g, "del ssl cert "+name))
	}
	return remove
}

// PlanTLSMaps returns the commands that make the redirect map hold the
// hosts of want that a listed certificate serves, and the ACME map hold
// challenges (token to key authorization). It is pure.
func PlanTLSMaps(want []Certificate, listed map[string][]string, challenges map[string]string, o TLSObserved, dir string) []string {
	served := map[string]bool{}
	for _, hosts := range listed {
		for _, h := range hosts {
			served[h] = true
		}
	}
	hosts := map[string]string{}
	for _, c := range want {
		for _, h := range c.Hosts {
			if served[h] {
				hosts[h] = "1"
			}
		}
	}
	cmds := mapDiff(dir+"/"+TLSMap, hosts, o.TLS)
	return append(cmds, mapDiff(dir+"/"+ACMEMap, challenges, o.ACME)...)
}

// mapDiff returns the commands that bring the map file from have to want.
func mapDiff(file string, want, have map[string]string) []string {
	var cmds []string
	for _, k := range slices.Sorted(maps.Keys(want)) {
		switch old, ok := have[k]; {
		case !ok:
			cmds = append(cmds, "add map "+file+" "+k+" "+want[k])
		case old != want[k]:
			cmds = append(cmds, "set map "+file+" "+k+" "+want[k])
		}
	}
	for _, k := range slices.Sorted(maps.Keys(have)) {
		if _, ok := want[k]; !ok {
			cmds = append(cmds, "del map "+file+" "+k)
		}
	}
	return cmds
}

// ExecGroups runs each group of commands in order, a group stopping at
// its first refusal; ok[i] says whether group i ran through. The error
// joins the refusals (commands named without their payloads).
func (c Client) ExecGroups(ctx context.Context, groups [][]string) (ok []bool, err error) {
	ok = make([]bool, len(groups))
	var errs []error
	for i, g := range groups {
		ok[i] = true
		for _, cmd := range g {
			if err := c.Exec(ctx, []string{cmd}); err != nil {
				ok[i] = false
				errs = append(errs, err)
				break
			}
		}
	}
	return ok, errors.Join(errs...)
}
