// Package apiclient is the HTTP client of KAT's v1alpha1 API, which katcall
// and the agents use. It speaks in the records of package api and links
// neither etcd nor go-git nor the server, so katcall stays small.
//
//	c, err := apiclient.New(apiclient.Config{Server: url, Token: token, CAData: caPEM})
//	ws, err := c.ListWorkloads(ctx, "")
//
// Errors the server answers come back as *[api.Error], with the HTTP status,
// a short code and, for a refused Quadlet, every invalid field. With several
// servers (Config.Servers) a request goes on to the next one while the one
// in use cannot be reached or has no leader to answer for.
//
// [Join] is how a new node joins: it checks the cluster CA against the join
// token before it sends the token's secret.
package apiclient
