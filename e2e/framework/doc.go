// Package framework runs Trustplane end to end, in one of two ways that share
// the specs: Local (the built kube-apiserver, etcd and spire-server, with the
// three operators as processes under their own service accounts' RBAC) and
// Kind (a kind cluster with images, SPIRE from its public images and
// `make deploy-<operator>`). Specs see only the Cluster interface: a
// kubeconfig-based client and SPIRE's gRPC API.
package framework
