package tether_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	tether "github.com/tether-dev/tether/clients/go"
	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// The client's surface beyond the conformance suite, against the live gateway.

func dial(t *testing.T, token string) *tether.Client {
	t.Helper()
	c, err := tether.Dial(liveGateway(t).address, token, dialOptions()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func TestFoldersInAndOut(t *testing.T) {
	c := dial(t, liveGateway(t).tokenA)
	ctx := context.Background()
	src := t.TempDir()
	if err := os.MkdirAll(filepath.Join(src, "pkg"), 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(src, "pkg", "mod.go"), []byte("package pkg\n"), 0o644)
	os.WriteFile(filepath.Join(src, "README.md"), []byte("# project\n"), 0o644)
	run, err := c.CreateRun(ctx, &pb.CreateRunRequest{ConversationId: "go-files"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(ctx, run.GetRunId())
	res, err := c.PutDir(ctx, run.GetRunId(), "project", src)
	if err != nil || res.GetFilesWritten() != 2 {
		t.Fatalf("PutDir: %v, %v", res, err)
	}
	dest := t.TempDir()
	written, err := c.GetFilesInto(ctx, run.GetRunId(), "project", dest)
	if err != nil || len(written) != 2 {
		t.Fatalf("GetFilesInto: %v, %v", written, err)
	}
	if b, _ := os.ReadFile(filepath.Join(dest, "project", "pkg", "mod.go")); string(b) != "package pkg\n" {
		t.Fatalf("round trip gave %q", b)
	}
	if _, err := c.PutFiles(ctx, run.GetRunId(), "../outside", map[string][]byte{"x": []byte("x")}); tether.Code(err) != codes.InvalidArgument {
		t.Fatalf("an escaping folder: %v", err)
	}
}

func TestHealthNeedsNoToken(t *testing.T) {
	ctx := context.Background()
	c := dial(t, "")
	if s, err := c.Health(ctx, ""); err != nil || s != "SERVING" {
		t.Fatalf("Health: %q, %v", s, err)
	}
	if _, err := c.Health(ctx, "no.such.Service"); !tether.IsNotFound(err) {
		t.Fatalf("an unknown service: %v", err)
	}
}

func TestErrorsCarryTheirCode(t *testing.T) {
	ctx := context.Background()
	_, err := dial(t, "").ListRuns(ctx)
	var te *tether.Error
	if !errors.As(err, &te) || te.Code != codes.Unauthenticated || status.Code(err) != codes.Unauthenticated {
		t.Fatalf("no token: %v", err)
	}
	_, err = dial(t, liveGateway(t).tokenA).GetRun(ctx, "run-that-does-not-exist")
	if !tether.IsNotFound(err) {
		t.Fatalf("an unknown run: %v", err)
	}
}

func TestContextCancelAndDeadline(t *testing.T) {
	c := dial(t, liveGateway(t).tokenA)
	bg := context.Background()
	run, err := c.CreateRun(bg, &pb.CreateRunRequest{Features: &pb.Features{Eval: true}})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(bg, run.GetRunId())
	long := map[string]any{"code": "import time\ntime.sleep(60)", "description": "a long sleep that gets cancelled"}

	ctx, cancel := context.WithCancelCause(bg)
	time.AfterFunc(time.Second, func() { cancel(errors.New("the user closed the tab")) })
	out, err := c.CallTool(ctx, run.GetRunId(), "eval", long, tether.CallOptions{})
	if err != nil || !out.IsError() || !strings.Contains(out.Text(), "cancelled") {
		t.Fatalf("a cancelled call ends with the gateway's result: %v, %v", out, err)
	}

	short, stop := context.WithTimeout(bg, 1500*time.Millisecond)
	defer stop()
	_, err = c.CallTool(short, run.GetRunId(), "eval", long, tether.CallOptions{})
	if tether.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("a passed deadline: %v", err)
	}

	after, err := c.CallTool(bg, run.GetRunId(), "eval", map[string]any{"code": "print(6 * 7)", "description": "the run still answers after that"}, tether.CallOptions{})
	if err != nil || !strings.Contains(after.Text(), "42") {
		t.Fatalf("after: %v, %v", after, err)
	}
}

func TestEgressLogOfARunWithoutEgress(t *testing.T) {
	c := dial(t, liveGateway(t).tokenA)
	ctx := context.Background()
	run, err := c.CreateRun(ctx, &pb.CreateRunRequest{ConversationId: "go-egress"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(ctx, run.GetRunId())
	records, err := c.EgressLog(ctx, run.GetRunId())
	if err != nil || len(records) != 0 {
		t.Fatalf("a run without egress: %v, %v", records, err)
	}
	if _, err := c.GetEgressLog(ctx, "", 10, "not-a-token"); tether.Code(err) != codes.InvalidArgument {
		t.Fatalf("a page token the gateway never gave: %v", err)
	}
}

// streamCounter counts the streams a client opens, by method.
type streamCounter struct {
	mu     sync.Mutex
	opened map[string]int
}

func (sc *streamCounter) option() grpc.DialOption {
	return grpc.WithStreamInterceptor(func(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
		sc.mu.Lock()
		sc.opened[method]++
		sc.mu.Unlock()
		return streamer(ctx, desc, cc, method, opts...)
	})
}

func (sc *streamCounter) count(method string) int {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	return sc.opened["/tether.v1.Gateway/"+method]
}

var fileNumbers = regexp.MustCompile(`content of file (\d+)`)

// Forty reads, a question card and a bridged call at once on one client: each gets its own
// result, on one Calls stream unless multiplexing is off.
func TestManyConcurrentCallsOnOneClient(t *testing.T) {
	env := liveGateway(t)
	streams := &streamCounter{opened: map[string]int{}}
	c, err := tether.Dial(env.address, env.tokenA, append(dialOptions(), streams.option())...)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx := context.Background()
	run, err := c.CreateRun(ctx, &pb.CreateRunRequest{
		ConversationId: "go-concurrent",
		Features:       &pb.Features{Eval: true, Questions: &pb.QuestionsFeature{Enabled: true, TargetSpace: "go"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.DeleteRun(ctx, run.GetRunId())
	const n = 40
	files := map[string][]byte{}
	for i := range n {
		files[fmt.Sprintf("f%d.txt", i)] = []byte(fmt.Sprintf("content of file %d\n", i))
	}
	if _, err := c.PutFiles(ctx, run.GetRunId(), "", files); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	call := func(check func() error) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := check(); err != nil {
				t.Error(err)
			}
		}()
	}
	for i := range n {
		call(func() error {
			out, err := c.CallTool(ctx, run.GetRunId(), "read", map[string]any{"path": fmt.Sprintf("f%d.txt", i)}, tether.CallOptions{})
			if err != nil || out.IsError() {
				return fmt.Errorf("read of f%d.txt: %v, %v", i, out, err)
			}
			// The file's content, and no other's.
			if got := fileNumbers.FindAllStringSubmatch(out.Text(), -1); len(got) != 1 || got[0][1] != fmt.Sprint(i) {
				return fmt.Errorf("read of f%d.txt gave %q", i, out.Text())
			}
			return nil
		})
	}
	call(func() error {
		out, err := c.CallTool(ctx, run.GetRunId(), "ask_user", map[string]any{"question": "Ship it?"}, tether.CallOptions{
			OnQuestion: func(_ context.Context, q *pb.Question) (*pb.Answer, error) {
				return &pb.Answer{FreeText: "yes to " + q.GetQuestion()}, nil
			},
		})
		if err != nil || !strings.Contains(out.Text(), "yes to Ship it?") {
			return fmt.Errorf("ask_user: %v, %v", out, err)
		}
		return nil
	})
	call(func() error {
		args := map[string]any{"code": `print(tool("client_echo", {"say": "hi"}))`, "description": "call a tool the client owns"}
		out, err := c.CallTool(ctx, run.GetRunId(), "eval", args, tether.CallOptions{
			OnBridgeCall: func(_ context.Context, b *pb.BridgeCall) (*pb.ToolResult, error) {
				return tether.TextResult("echo "+b.GetArgumentsJson(), false), nil
			},
		})
		if err != nil || out.IsError() || !strings.Contains(out.Text(), `echo {"say": "hi"}`) && !strings.Contains(out.Text(), `echo {"say":"hi"}`) {
			return fmt.Errorf("a bridged call: %v, %v", out, err)
		}
		return nil
	})
	wg.Wait()
	calls, own := streams.count("Calls"), streams.count("CallTool")
	if os.Getenv("TETHER_CONFORMANCE_MULTIPLEX") == "0" {
		if calls != 0 || own != n+2 {
			t.Fatalf("%d Calls and %d CallTool streams, expected 0 and %d", calls, own, n+2)
		}
	} else if calls != 1 || own != 0 {
		t.Fatalf("%d Calls and %d CallTool streams, expected 1 and 0", calls, own)
	}
}
