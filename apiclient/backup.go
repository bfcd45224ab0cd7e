package apiclient

import (
	"context"
	"net/http"

	"kat.dws.rip/kat/api"
)

// Backup asks the leader to write a snapshot now and returns it.
func (c *Client) Backup(ctx context.Context) (*api.Backup, error) {
	var b api.Backup
	return &b, c.do(ctx, http.MethodPost, api.BackupPath, nil, nil, "", &b)
}
