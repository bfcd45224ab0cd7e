// Package api is KAT's model: every record the v1alpha1 API carries and etcd
// stores, defined once, with its small methods and enumeration constants,
// and the API's request and response bodies, its paths and its error body
// ([Error]). The store (store/resources), the leader, the agent, the server
// (apiserver), the client (apiclient) and katcall all use these types as
// they are. It imports the standard library only.
//
// The JSON field names are the wire's and etcd's: renaming one breaks the
// clients and the data of running clusters.
package api
