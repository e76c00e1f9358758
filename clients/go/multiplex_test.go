package tether_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	tether "github.com/tether-dev/tether/clients/go"
	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// The client's call paths against a small in-process gateway that speaks both CallTool and
// Calls (the live gateway's own tests are in client_test.go and the conformance suite). Its
// tools:
//   echo     progress, then (when asked) a question card and a bridged call, then a result
//            of "<arguments>|<answer>|<bridged result>"
//   sleep    waits for Cancel, then ends with the result "cancelled: <reason>"
//   stubborn waits for its stream to end, ignoring Cancel
//   limited  refused: RESOURCE_EXHAUSTED, retry after 1.5 s
//   crash    ends the whole Calls stream UNAVAILABLE

type fakeGateway struct {
	pb.UnimplementedGatewayServer
	noCalls     bool // answer Calls UNIMPLEMENTED, as a gateway from before Calls does
	callsOpened atomic.Int32
	ownOpened   atomic.Int32

	mu           sync.Mutex
	cancels      []string
	traceparents []string
}

var errCrash = status.Error(codes.Unavailable, "the gateway is going away")

func authorized(ctx context.Context) bool {
	md, _ := metadata.FromIncomingContext(ctx)
	v := md.Get("authorization")
	return len(v) == 1 && v[0] == "Bearer good"
}

func (g *fakeGateway) runTool(ctx context.Context, start *pb.CallToolStart, in <-chan *pb.CallToolInput, send func(*pb.CallToolOutput)) error {
	next := func() *pb.CallToolInput {
		select {
		case m := <-in:
			return m
		case <-ctx.Done():
			return nil
		}
	}
	result := func(text string) error {
		send(&pb.CallToolOutput{Msg: &pb.CallToolOutput_Result{Result: tether.TextResult(text, false)}})
		return nil
	}
	switch start.GetTool() {
	case "echo":
		var args struct {
			DelayMs int  `json:"delayMs"`
			Ask     bool `json:"ask"`
			Bridge  bool `json:"bridge"`
		}
		if err := json.Unmarshal([]byte(start.GetArgumentsJson()), &args); err != nil {
			return status.Error(codes.InvalidArgument, err.Error())
		}
		send(&pb.CallToolOutput{Msg: &pb.CallToolOutput_Progress{Progress: &pb.Progress{Text: "working"}}})
		answer, bridged := "", ""
		if args.Ask {
			qid := "q" + start.GetArgumentsJson()
			send(&pb.CallToolOutput{Msg: &pb.CallToolOutput_Question{Question: &pb.Question{Id: qid, Question: start.GetArgumentsJson()}}})
			a := next().GetAnswer()
			if a.GetQuestionId() != qid {
				return status.Errorf(codes.InvalidArgument, "answer to %q for card %q", a.GetQuestionId(), qid)
			}
			answer = a.GetFreeText()
		}
		if args.Bridge {
			bid := "b" + start.GetArgumentsJson()
			send(&pb.CallToolOutput{Msg: &pb.CallToolOutput_BridgeCall{BridgeCall: &pb.BridgeCall{BridgeId: bid, Tool: "lookup", ArgumentsJson: start.GetArgumentsJson()}}})
			r := next().GetBridgeResult()
			if r.GetBridgeId() != bid {
				return status.Errorf(codes.InvalidArgument, "bridge result %q for %q", r.GetBridgeId(), bid)
			}
			bridged = tether.ResultText(r.GetResult())
		}
		time.Sleep(time.Duration(args.DelayMs) * time.Millisecond)
		return result(start.GetArgumentsJson() + "|" + answer + "|" + bridged)
	case "sleep":
		for {
			m := next()
			if m == nil {
				return nil
			}
			if c := m.GetCancel(); c != nil {
				g.mu.Lock()
				g.cancels = append(g.cancels, c.GetReason())
				g.mu.Unlock()
				return result("cancelled: " + c.GetReason())
			}
		}
	case "stubborn":
		<-ctx.Done()
		return nil
	case "limited":
		s, _ := status.New(codes.ResourceExhausted, "rate limit").WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(1500 * time.Millisecond)})
		return s.Err()
	case "crash":
		return errCrash
	}
	return status.Errorf(codes.NotFound, "no tool %q", start.GetTool())
}

func (g *fakeGateway) CallTool(stream pb.Gateway_CallToolServer) error {
	g.ownOpened.Add(1)
	if !authorized(stream.Context()) {
		return status.Error(codes.Unauthenticated, "bad token")
	}
	first, err := stream.Recv()
	if err != nil {
		return err
	}
	in := make(chan *pb.CallToolInput, 16)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				return
			}
			in <- m
		}
	}()
	var sendMu sync.Mutex
	return g.runTool(stream.Context(), first.GetStart(), in, func(o *pb.CallToolOutput) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(o)
	})
}

func (g *fakeGateway) Calls(stream pb.Gateway_CallsServer) error {
	g.callsOpened.Add(1)
	if g.noCalls {
		return status.Error(codes.Unimplemented, "unknown method Calls")
	}
	if !authorized(stream.Context()) {
		_, _ = stream.Recv()
		return status.Error(codes.Unauthenticated, "bad token")
	}
	ctx, stop := context.WithCancel(stream.Context())
	defer stop()
	var (
		sendMu sync.Mutex
		mu     sync.Mutex
		calls  = map[string]chan *pb.CallToolInput{}
		wg     sync.WaitGroup
	)
	send := func(m *pb.CallsOutput) {
		sendMu.Lock()
		defer sendMu.Unlock()
		_ = stream.Send(m)
	}
	crashed := make(chan error, 1)
	inputEnded := make(chan error, 1)
	go func() {
		for {
			m, err := stream.Recv()
			if err != nil {
				inputEnded <- err
				return
			}
			id := m.GetCallId()
			start := m.GetInput().GetStart()
			if start == nil {
				mu.Lock()
				ch := calls[id]
				mu.Unlock()
				if ch != nil {
					ch <- m.GetInput()
				}
				continue
			}
			g.mu.Lock()
			g.traceparents = append(g.traceparents, m.GetTraceparent())
			g.mu.Unlock()
			ch := make(chan *pb.CallToolInput, 16)
			mu.Lock()
			calls[id] = ch
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				err := g.runTool(ctx, start, ch, func(o *pb.CallToolOutput) {
					send(&pb.CallsOutput{CallId: id, Msg: &pb.CallsOutput_Output{Output: o}})
				})
				mu.Lock()
				delete(calls, id)
				mu.Unlock()
				if errors.Is(err, errCrash) {
					crashed <- err
				} else if err != nil {
					s := status.Convert(err)
					var retry uint32
					for _, d := range s.Details() {
						if info, ok := d.(*errdetails.RetryInfo); ok {
							retry = uint32(info.GetRetryDelay().AsDuration().Milliseconds())
						}
					}
					send(&pb.CallsOutput{CallId: id, Msg: &pb.CallsOutput_Error{Error: &pb.CallError{Code: int32(s.Code()), Message: s.Message(), RetryAfterMs: retry}}})
				}
			}()
		}
	}()
	select {
	case err := <-crashed:
		return err
	case err := <-inputEnded:
		if !errors.Is(err, io.EOF) {
			return err
		}
		wg.Wait()
		return nil
	}
}

func startFake(t *testing.T, g *fakeGateway) string {
	t.Helper()
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	pb.RegisterGatewayServer(srv, g)
	go srv.Serve(lis)
	t.Cleanup(srv.Stop)
	return lis.Addr().String()
}

func fakeClient(t *testing.T, g *fakeGateway, token string, opts ...grpc.DialOption) *tether.Client {
	t.Helper()
	c, err := tether.Dial(startFake(t, g), token, opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Many calls at once on one client, with cards and bridged calls among them, each finish in
// their own time and each gets its own result.
func concurrentCalls(t *testing.T, c *tether.Client, n int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			args := map[string]any{"n": i, "delayMs": (i * 7) % 40, "ask": i%3 == 0, "bridge": i%4 == 0}
			argsJSON, _ := json.Marshal(args)
			var progress atomic.Int32
			out, err := c.CallTool(context.Background(), "run-1", "echo", args, tether.CallOptions{
				OnQuestion: func(_ context.Context, q *pb.Question) (*pb.Answer, error) {
					return &pb.Answer{FreeText: "answer to " + q.GetQuestion()}, nil
				},
				OnBridgeCall: func(_ context.Context, b *pb.BridgeCall) (*pb.ToolResult, error) {
					return tether.TextResult("looked up "+b.GetArgumentsJson(), false), nil
				},
				OnProgress: func(string) { progress.Add(1) },
			})
			if err != nil {
				errs <- fmt.Errorf("call %d: %w", i, err)
				return
			}
			want := string(argsJSON) + "|"
			if i%3 == 0 {
				want += "answer to " + string(argsJSON)
			}
			want += "|"
			if i%4 == 0 {
				want += "looked up " + string(argsJSON)
			}
			if out.Text() != want || progress.Load() != 1 || len(out.Progress) != 1 {
				errs <- fmt.Errorf("call %d: %q (progress %d), expected %q", i, out.Text(), progress.Load(), want)
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}

func TestManyConcurrentCallsShareOneStream(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "good")
	concurrentCalls(t, c, 200)
	if g.callsOpened.Load() != 1 || g.ownOpened.Load() != 0 {
		t.Fatalf("%d Calls streams and %d CallTool streams, expected 1 and 0", g.callsOpened.Load(), g.ownOpened.Load())
	}
}

func TestWithoutMultiplexEachCallHasItsOwnStream(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "good", tether.WithMultiplex(false))
	concurrentCalls(t, c, 40)
	if g.callsOpened.Load() != 0 || g.ownOpened.Load() != 40 {
		t.Fatalf("%d Calls streams and %d CallTool streams, expected 0 and 40", g.callsOpened.Load(), g.ownOpened.Load())
	}
}

func TestAGatewayWithoutCallsGetsOneStreamPerCall(t *testing.T) {
	g := &fakeGateway{noCalls: true}
	c := fakeClient(t, g, "good")
	concurrentCalls(t, c, 20)
	concurrentCalls(t, c, 20)
	if g.callsOpened.Load() != 1 || g.ownOpened.Load() != 40 {
		t.Fatalf("%d Calls streams and %d CallTool streams, expected 1 and 40", g.callsOpened.Load(), g.ownOpened.Load())
	}
}

func TestARefusedCallCarriesItsCodeAndRetryAfter(t *testing.T) {
	for _, multiplex := range []bool{true, false} {
		c := fakeClient(t, &fakeGateway{}, "good", tether.WithMultiplex(multiplex))
		_, err := c.CallTool(context.Background(), "run-1", "limited", nil, tether.CallOptions{})
		var te *tether.Error
		if !errors.As(err, &te) || te.Code != codes.ResourceExhausted || te.RetryAfter != 1500*time.Millisecond || te.Message != "rate limit" {
			t.Fatalf("multiplex %v: %#v", multiplex, err)
		}
		_, err = c.CallTool(context.Background(), "run-1", "nope", nil, tether.CallOptions{})
		if !tether.IsNotFound(err) {
			t.Fatalf("multiplex %v: an unknown tool: %v", multiplex, err)
		}
		// The stream outlives a refused call.
		if out, err := c.CallTool(context.Background(), "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil || out.Text() != "{}||" {
			t.Fatalf("multiplex %v: after a refused call: %v, %v", multiplex, out, err)
		}
	}
}

func TestAFailedStreamFailsEveryCallInFlightAndTheNextCallOpensAnother(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "good")
	ctx := context.Background()
	if _, err := c.CallTool(ctx, "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	codesSeen := make(chan codes.Code, 5)
	for range 5 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := c.CallTool(ctx, "run-1", "sleep", nil, tether.CallOptions{})
			codesSeen <- tether.Code(err)
		}()
	}
	time.Sleep(200 * time.Millisecond) // the five are in flight
	if _, err := c.CallTool(ctx, "run-1", "crash", nil, tether.CallOptions{}); tether.Code(err) != codes.Unavailable {
		t.Fatalf("the call that broke the stream: %v", err)
	}
	wg.Wait()
	close(codesSeen)
	for code := range codesSeen {
		if code != codes.Unavailable {
			t.Errorf("a call in flight ended %s, expected UNAVAILABLE", code)
		}
	}
	if out, err := c.CallTool(ctx, "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil || out.Text() != "{}||" {
		t.Fatalf("the next call: %v, %v", out, err)
	}
	if n := g.callsOpened.Load(); n != 2 {
		t.Fatalf("%d Calls streams, expected 2", n)
	}
}

func TestABadTokenFailsTheCallAndTheNextCallTriesAgain(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "bad")
	for range 2 {
		if _, err := c.CallTool(context.Background(), "run-1", "echo", map[string]any{}, tether.CallOptions{}); tether.Code(err) != codes.Unauthenticated {
			t.Fatalf("a bad token: %v", err)
		}
	}
	if n := g.callsOpened.Load(); n != 2 {
		t.Fatalf("%d Calls streams, expected 2", n)
	}
}

func TestDeadlineSendsCancelAndReturnsAtOnce(t *testing.T) {
	for _, multiplex := range []bool{true, false} {
		g := &fakeGateway{}
		c := fakeClient(t, g, "good", tether.WithMultiplex(multiplex))
		ctx, stop := context.WithTimeout(context.Background(), 300*time.Millisecond)
		began := time.Now()
		_, err := c.CallTool(ctx, "run-1", "sleep", nil, tether.CallOptions{})
		stop()
		if tether.Code(err) != codes.DeadlineExceeded || time.Since(began) > 2*time.Second {
			t.Fatalf("multiplex %v: %v after %v", multiplex, err, time.Since(began))
		}
		if multiplex {
			// The gateway is told; its late result for the call is dropped.
			deadline := time.Now().Add(2 * time.Second)
			for {
				g.mu.Lock()
				told := len(g.cancels) == 1 && g.cancels[0] == "deadline exceeded"
				g.mu.Unlock()
				if told || time.Now().After(deadline) {
					if !told {
						t.Fatalf("cancels: %v", g.cancels)
					}
					break
				}
				time.Sleep(10 * time.Millisecond)
			}
		}
		if out, err := c.CallTool(context.Background(), "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil || out.Text() != "{}||" {
			t.Fatalf("multiplex %v: the next call: %v, %v", multiplex, out, err)
		}
	}
}

func TestCancelEndsWithTheGatewaysResult(t *testing.T) {
	for _, multiplex := range []bool{true, false} {
		c := fakeClient(t, &fakeGateway{}, "good", tether.WithMultiplex(multiplex))
		ctx, cancel := context.WithCancelCause(context.Background())
		time.AfterFunc(100*time.Millisecond, func() { cancel(errors.New("the user left")) })
		out, err := c.CallTool(ctx, "run-1", "sleep", nil, tether.CallOptions{})
		if err != nil || out.Text() != "cancelled: the user left" {
			t.Fatalf("multiplex %v: %v, %v", multiplex, out, err)
		}
	}
}

func TestACancelWithoutResultEndsAfterTheGrace(t *testing.T) {
	for _, multiplex := range []bool{true, false} {
		c := fakeClient(t, &fakeGateway{}, "good", tether.WithMultiplex(multiplex))
		ctx, cancel := context.WithCancelCause(context.Background())
		reason := errors.New("the user left")
		time.AfterFunc(100*time.Millisecond, func() { cancel(reason) })
		_, err := c.CallTool(ctx, "run-1", "stubborn", nil, tether.CallOptions{CancelGrace: 200 * time.Millisecond})
		if tether.Code(err) != codes.Canceled || !errors.Is(err, reason) {
			t.Fatalf("multiplex %v: %v", multiplex, err)
		}
	}
}

func TestTraceparentTravelsWithTheStart(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "good")
	const tp = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	ctx := metadata.AppendToOutgoingContext(context.Background(), "traceparent", tp)
	if _, err := c.CallTool(ctx, "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil {
		t.Fatal(err)
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if len(g.traceparents) != 1 || g.traceparents[0] != tp {
		t.Fatalf("traceparents: %v", g.traceparents)
	}
}

func TestCloseEndsTheSharedStream(t *testing.T) {
	g := &fakeGateway{}
	c := fakeClient(t, g, "good")
	ended := make(chan error, 1)
	go func() {
		_, err := c.CallTool(context.Background(), "run-1", "stubborn", nil, tether.CallOptions{})
		ended <- err
	}()
	time.Sleep(200 * time.Millisecond)
	c.Close()
	select {
	case err := <-ended:
		if tether.Code(err) != codes.Canceled {
			t.Fatalf("a call in flight at Close: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a call in flight outlived Close")
	}
	if _, err := c.CallTool(context.Background(), "run-1", "echo", map[string]any{}, tether.CallOptions{}); err == nil {
		t.Fatal("a call after Close succeeded")
	}
}

func TestADeadlineHoldsWhileTheStreamOpens(t *testing.T) {
	addr := startFake(t, &fakeGateway{})
	slowDial := grpc.WithContextDialer(func(ctx context.Context, a string) (net.Conn, error) {
		time.Sleep(time.Second)
		return (&net.Dialer{}).DialContext(ctx, "tcp", a)
	})
	c, err := tether.Dial(addr, "good", slowDial)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, stop := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer stop()
	began := time.Now()
	if _, err := c.CallTool(ctx, "run-1", "echo", map[string]any{}, tether.CallOptions{}); tether.Code(err) != codes.DeadlineExceeded || time.Since(began) > 800*time.Millisecond {
		t.Fatalf("%v after %v", err, time.Since(began))
	}
	// The stream opened meanwhile serves the next call.
	if out, err := c.CallTool(context.Background(), "run-1", "echo", map[string]any{}, tether.CallOptions{}); err != nil || out.Text() != "{}||" {
		t.Fatalf("the next call: %v, %v", out, err)
	}
}
