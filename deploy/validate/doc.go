// Package validate holds the tests of deploy/: the Kubernetes manifests (built with
// kustomize and strictly decoded into the Kubernetes API types), the compose file (loaded
// and schema-checked with compose-go), the container build files and the systemd unit.
// Config files are checked by walrelay's own loader: the tests build the walrelay binary
// from the repository and start it on each file.
//
// It is a module of its own so that the Kubernetes, kustomize and compose libraries stay
// out of walrelay's go.mod. Run it with `cd deploy/validate && go test ./...` (make test
// does).
package validate
