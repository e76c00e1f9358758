// The Go side of bench/clients.ts: one client, the contenders and calls of
// bench/clients/shape.ts in its order.
//
// Usage: clients-go <address> <token> <runId> <rounds> <warm-up rounds>
// Prints one JSON object: each contender's samples in milliseconds.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"time"

	tether "github.com/tether-dev/tether/clients/go"
)

var (
	read  = map[string]any{"path": "bench.txt"}
	hover = map[string]any{"action": "hover", "file": "src/main.ts", "line": 3, "symbol": "Circle"}
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}

func run(args []string) error {
	if len(args) != 5 {
		return fmt.Errorf("usage: clients-go <address> <token> <runId> <rounds> <warm-up rounds>")
	}
	address, token, runID := args[0], args[1], args[2]
	rounds, err := strconv.Atoi(args[3])
	if err != nil {
		return err
	}
	warm, err := strconv.Atoi(args[4])
	if err != nil {
		return err
	}
	ctx := context.Background()
	shared, err := tether.Dial(address, token)
	if err != nil {
		return err
	}
	defer shared.Close()
	own, err := tether.Dial(address, token, tether.WithMultiplex(false))
	if err != nil {
		return err
	}
	defer own.Close()
	call := func(c *tether.Client, tool string, a map[string]any) func() error {
		return func() error {
			out, err := c.CallTool(ctx, runID, tool, a, tether.CallOptions{})
			if err != nil {
				return err
			}
			if out.IsError() {
				return fmt.Errorf("%s: %s", tool, out.Text())
			}
			return nil
		}
	}
	names := []string{"health", "readCalls", "readCallTool", "hoverCalls", "hoverCallTool"}
	fns := []func() error{
		func() error { _, err := shared.Health(ctx, ""); return err },
		call(shared, "read", read),
		call(own, "read", read),
		call(shared, "lsp", hover),
		call(own, "lsp", hover),
	}
	samples := map[string][]float64{}
	for i := -warm; i < rounds; i++ {
		for j, fn := range fns {
			t0 := time.Now()
			if err := fn(); err != nil {
				return err
			}
			if i >= 0 {
				samples[names[j]] = append(samples[names[j]], float64(time.Since(t0).Nanoseconds())/1e6)
			}
		}
	}
	return json.NewEncoder(os.Stdout).Encode(samples)
}
