package tether

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
	"sync"
	"time"

	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// CallOptions shape one CallTool. The zero value is a plain call on the default surface.
type CallOptions struct {
	// ArgumentsJSON, when set, is sent as is instead of the marshalled args.
	ArgumentsJSON *string
	Surface       *pb.Surface
	CallID        string
	// OnQuestion declares a human is connected and answers question and approval cards. It
	// sets QuestionId itself. Returning (nil, nil) leaves the card open (e.g. after cancelling
	// ctx); an error cancels the call with the error's text as the reason.
	OnQuestion func(ctx context.Context, q *pb.Question) (*pb.Answer, error)
	// OnBridgeCall declares the client runs tools the gateway does not own (called from eval
	// cells). An error becomes an is_error result carrying its text.
	OnBridgeCall func(ctx context.Context, b *pb.BridgeCall) (*pb.ToolResult, error)
	OnProgress   func(text string)
	// CancelGrace is how long a cancelled call waits for the gateway's closing result before
	// the stream is dropped; 10 s when zero.
	CancelGrace time.Duration
}

// CallOutcome is the call's one result and everything that travelled before it.
type CallOutcome struct {
	Result      *pb.ToolResult
	Progress    []string
	Questions   []*pb.Question
	BridgeCalls []*pb.BridgeCall
}

// IsError reports whether the tool ran and failed (not a refused call: that is an *Error).
func (o *CallOutcome) IsError() bool { return o.Result.GetIsError() }

// Text is the result's text and json items, in order, joined with newlines.
func (o *CallOutcome) Text() string { return ResultText(o.Result) }

// ResultText joins a result's text and json content items with newlines.
func ResultText(r *pb.ToolResult) string {
	var parts []string
	for _, c := range r.GetContent() {
		switch item := c.GetItem().(type) {
		case *pb.Content_Text:
			parts = append(parts, item.Text)
		case *pb.Content_Json:
			parts = append(parts, item.Json)
		}
	}
	return strings.Join(parts, "\n")
}

// TextResult is a result with one text item, what a bridged-call handler usually returns.
func TextResult(text string, isError bool) *pb.ToolResult {
	return &pb.ToolResult{Content: []*pb.Content{{Item: &pb.Content_Text{Text: text}}}, IsError: isError}
}

// CallTool runs one tool call to its one result.
//
// Cancelling ctx (context.WithCancelCause gives the reason) sends Cancel to the gateway, which
// stops the tool and still ends the call with a result, returned normally. When ctx's deadline
// passes the call returns a DEADLINE_EXCEEDED error. A tool's own failure is
// outcome.IsError(); a refused call returns an *Error.
//
// Concurrent calls of one client share one Calls stream unless the client was dialled with
// WithMultiplex(false); either way each call behaves the same.
func (c *Client) CallTool(ctx context.Context, runID, tool string, args any, opts CallOptions) (*CallOutcome, error) {
	argsJSON := "{}"
	if opts.ArgumentsJSON != nil {
		argsJSON = *opts.ArgumentsJSON
	} else if args != nil {
		b, err := json.Marshal(args)
		if err != nil {
			return nil, err
		}
		argsJSON = string(b)
	}
	start := &pb.CallToolInput{Msg: &pb.CallToolInput_Start{Start: &pb.CallToolStart{
		RunId:              runID,
		CallId:             opts.CallID,
		Tool:               tool,
		ArgumentsJson:      argsJSON,
		Surface:            opts.Surface,
		AcceptsQuestions:   opts.OnQuestion != nil,
		AcceptsBridgeCalls: opts.OnBridgeCall != nil,
	}}}
	if c.calls != nil {
		out, err := c.calls.call(ctx, start, &opts)
		if !errors.Is(err, errNoCallsRPC) {
			return out, err
		}
	}
	return c.callOnOwnStream(ctx, start, &opts)
}

// callOnOwnStream runs the call on a CallTool stream of its own.
func (c *Client) callOnOwnStream(ctx context.Context, start *pb.CallToolInput, opts *CallOptions) (*CallOutcome, error) {
	// The stream outlives ctx's cancellation (so the Cancel message and the closing result can
	// travel) but keeps its deadline.
	streamCtx, dropStream := context.WithCancel(context.WithoutCancel(ctx))
	defer dropStream()
	if dl, ok := ctx.Deadline(); ok {
		var stop context.CancelFunc
		streamCtx, stop = context.WithDeadline(streamCtx, dl)
		defer stop()
	}
	stream, err := c.rpc.CallTool(c.Authorize(streamCtx))
	if err != nil {
		return nil, wrap(err)
	}
	var sendMu sync.Mutex
	send := func(m *pb.CallToolInput) {
		sendMu.Lock()
		defer sendMu.Unlock()
		// A failed send means the stream ended; Recv reports how.
		_ = stream.Send(m)
	}
	send(start)
	call := &callState{ctx: ctx, opts: opts, send: send}

	done := make(chan struct{})
	defer close(done)
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return // the stream's own deadline ends it with DEADLINE_EXCEEDED
		}
		call.cancel(cancelReason(ctx))
		select {
		case <-done:
		case <-time.After(opts.cancelGrace()):
			dropStream()
		}
	}()

	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil && streamCtx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, contextError(ctx.Err(), context.Cause(ctx))
			}
			return nil, wrap(err)
		}
		call.handle(msg)
	}
	sendMu.Lock()
	_ = stream.CloseSend()
	sendMu.Unlock()
	if call.out.Result == nil {
		// The deadline passed and the gateway, seeing the stream's context end, closed it
		// before this side saw DEADLINE_EXCEEDED: the caller's deadline is the reason.
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return nil, contextError(ctx.Err(), context.Cause(ctx))
		}
		return nil, ErrNoResult
	}
	return &call.out, nil
}

// callState is one call's side of the conversation, whichever stream carries it: it records
// what arrives, runs the caller's handlers and sends their answers.
type callState struct {
	ctx  context.Context
	opts *CallOptions
	send func(*pb.CallToolInput)
	out  CallOutcome
}

// handle takes one message of the call and reports whether it was the result, which ends it.
func (s *callState) handle(msg *pb.CallToolOutput) (ended bool) {
	opts := s.opts
	switch m := msg.GetMsg().(type) {
	case *pb.CallToolOutput_Progress:
		s.out.Progress = append(s.out.Progress, m.Progress.GetText())
		if opts.OnProgress != nil {
			opts.OnProgress(m.Progress.GetText())
		}
	case *pb.CallToolOutput_Question:
		s.out.Questions = append(s.out.Questions, m.Question)
		if opts.OnQuestion == nil {
			return false
		}
		answer, err := opts.OnQuestion(s.ctx, m.Question)
		if err != nil {
			s.cancel(err.Error())
		} else if answer != nil {
			answer.QuestionId = m.Question.GetId()
			s.send(&pb.CallToolInput{Msg: &pb.CallToolInput_Answer{Answer: answer}})
		}
	case *pb.CallToolOutput_BridgeCall:
		s.out.BridgeCalls = append(s.out.BridgeCalls, m.BridgeCall)
		if opts.OnBridgeCall == nil {
			return false
		}
		result, err := opts.OnBridgeCall(s.ctx, m.BridgeCall)
		if err != nil {
			result = TextResult(err.Error(), true)
		}
		s.send(&pb.CallToolInput{Msg: &pb.CallToolInput_BridgeResult{BridgeResult: &pb.BridgeResult{BridgeId: m.BridgeCall.GetBridgeId(), Result: result}}})
	case *pb.CallToolOutput_Result:
		s.out.Result = m.Result
		return true
	}
	return false
}

func (s *callState) cancel(reason string) {
	s.send(&pb.CallToolInput{Msg: &pb.CallToolInput_Cancel{Cancel: &pb.Cancel{Reason: reason}}})
}

func (o *CallOptions) cancelGrace() time.Duration {
	if o.CancelGrace == 0 {
		return 10 * time.Second
	}
	return o.CancelGrace
}

func cancelReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return "cancelled"
	}
	return cause.Error()
}
