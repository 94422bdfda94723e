// Package deploy holds berth's deployment files (the Kubernetes manifests
// in kubernetes/) and the test that checks them against Kubernetes' own
// types. It is a module of its own, so that berth's users do not inherit
// the k8s.io dependencies of that test.
package deploy
