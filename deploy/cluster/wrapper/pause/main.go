// Command pause holds a pod's namespaces open: the sandbox container of every pod on the test
// cluster. It waits for SIGINT or SIGTERM and exits.
package main

import (
	"os"
	"os/signal"
	"syscall"
)

func main() {
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGINT, syscall.SIGTERM)
	<-signals
}
