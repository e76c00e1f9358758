//go:build tools

// Package tools pins gVisor's runsc, built by scripts/runsc.sh with `go build gvisor.dev/gvisor/runsc`.
package tools

import _ "gvisor.dev/gvisor/runsc"
