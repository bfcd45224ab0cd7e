package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"kat.dws.rip/kat/api"
	"kat.dws.rip/kat/apiclient"
)

// auditFlags are get's flags for the audit log.
type auditFlags struct {
	actor string
	limit int
}

func (f *auditFlags) register(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.actor, "actor", "", `audit only: entries of this actor ("admin", "node:n2"; "node:" for every node)`)
	cmd.Flags().IntVar(&f.limit, "limit", 0, "audit and events only: how many of the newest entries (default: 100 of the audit log, 50 events)")
}

// query checks the flags for kind and returns the audit query: NAME is the
// resource filter ("workload/default/web", "node").
func (f *auditFlags) query(cmd *cobra.Command, kind, name, namespace string) (api.AuditQuery, error) {
	if kind != "audit" {
		flags := []string{"actor", "limit"}
		if kind == "events" {
			flags = flags[:1]
		}
		for _, fl := range flags {
			if cmd.Flags().Changed(fl) {
				return api.AuditQuery{}, fmt.Errorf("--%s: only get audit takes it", fl)
			}
		}
		return api.AuditQuery{}, nil
	}
	if namespace != "" {
		return api.AuditQuery{}, errors.New("--namespace: get audit does not take it; name the objects instead, e.g. katcall get audit workload/" + namespace)
	}
	if cmd.Flags().Changed("limit") && f.limit < 1 {
		return api.AuditQuery{}, fmt.Errorf("--limit: %d is not a positive number", f.limit)
	}
	if cmd.Flags().Changed("actor") && f.actor == "" {
		return api.AuditQuery{}, errors.New("--actor: must not be empty")
	}
	return api.AuditQuery{Limit: f.limit, Actor: f.actor, Resource: name}, nil
}

// runGetAudit lists the newest audit entries matching q, oldest first.
func runGetAudit(ctx context.Context, c *apiclient.Client, g *globals, q api.AuditQuery, f outputFormat) error {
	es, err := c.ListAudit(ctx, q)
	if err != nil {
		return err
	}
	if es == nil {
		es = []api.AuditEntry{}
	}
	if f != formatTable {
		return printData(g.stdout, f, es)
	}
	t := newTable(g.stdout, "TIME", "ACTOR", "VERB", "RESOURCE", "RESULT")
	for _, e := range es {
		obj := e.Object()
		if d := e.Detail; d != "" {
			if strings.Trim(d, "0123456789abcdef") == "" {
				d = api.ShortCommit(d) // a commit
			}
			obj += "@" + d
		}
		result := fmt.Sprint(e.Status)
		if e.Error != "" {
			result += " " + e.Error
		}
		t.row(e.Time.Local().Format(time.DateTime), e.Actor, e.Verb, obj, result)
	}
	return t.flush()
}
