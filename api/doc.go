// Package api is KAT's v1alpha1 API as a client sees it: the wire types
// (spec §8, the same records etcd holds for nodes, instances, sources and
// events) and the [Client] that katcall and agents use. It imports neither
// etcd nor go-git, so katcall stays small; the server is package
// api/server.
//
//	c, err := api.NewClient(api.ClientConfig{Server: url, Token: token, CAData: caPEM})
//	ws, err := c.ListWorkloads(ctx, "")
//
// Errors the server answers come back as *[Error], with the HTTP status, a
// short code and, for a refused Quadlet, every invalid field.
package api
