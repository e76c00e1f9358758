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
// stops the tool and still ends the call with a result, returned normally. ctx's deadline is
// the call's gRPC deadline (DEADLINE_EXCEEDED when it passes). A tool's own failure is
// outcome.IsError(); a refused call returns an *Error.
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
	send(&pb.CallToolInput{Msg: &pb.CallToolInput_Start{Start: &pb.CallToolStart{
		RunId:              runID,
		CallId:             opts.CallID,
		Tool:               tool,
		ArgumentsJson:      argsJSON,
		Surface:            opts.Surface,
		AcceptsQuestions:   opts.OnQuestion != nil,
		AcceptsBridgeCalls: opts.OnBridgeCall != nil,
	}}})

	done := make(chan struct{})
	defer close(done)
	grace := opts.CancelGrace
	if grace == 0 {
		grace = 10 * time.Second
	}
	go func() {
		select {
		case <-done:
			return
		case <-ctx.Done():
		}
		if errors.Is(ctx.Err(), context.DeadlineExceeded) {
			return // the stream's own deadline ends it with DEADLINE_EXCEEDED
		}
		send(&pb.CallToolInput{Msg: &pb.CallToolInput_Cancel{Cancel: &pb.Cancel{Reason: cancelReason(ctx)}}})
		select {
		case <-done:
		case <-time.After(grace):
			dropStream()
		}
	}()

	out := &CallOutcome{}
	for {
		msg, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			if ctx.Err() != nil && streamCtx.Err() != nil && !errors.Is(ctx.Err(), context.DeadlineExceeded) {
				return nil, context.Cause(ctx)
			}
			return nil, wrap(err)
		}
		switch m := msg.GetMsg().(type) {
		case *pb.CallToolOutput_Progress:
			out.Progress = append(out.Progress, m.Progress.GetText())
			if opts.OnProgress != nil {
				opts.OnProgress(m.Progress.GetText())
			}
		case *pb.CallToolOutput_Question:
			out.Questions = append(out.Questions, m.Question)
			if opts.OnQuestion == nil {
				continue
			}
			answer, herr := opts.OnQuestion(ctx, m.Question)
			if herr != nil {
				send(&pb.CallToolInput{Msg: &pb.CallToolInput_Cancel{Cancel: &pb.Cancel{Reason: herr.Error()}}})
			} else if answer != nil {
				answer.QuestionId = m.Question.GetId()
				send(&pb.CallToolInput{Msg: &pb.CallToolInput_Answer{Answer: answer}})
			}
		case *pb.CallToolOutput_BridgeCall:
			out.BridgeCalls = append(out.BridgeCalls, m.BridgeCall)
			if opts.OnBridgeCall == nil {
				continue
			}
			result, herr := opts.OnBridgeCall(ctx, m.BridgeCall)
			if herr != nil {
				result = TextResult(herr.Error(), true)
			}
			send(&pb.CallToolInput{Msg: &pb.CallToolInput_BridgeResult{BridgeResult: &pb.BridgeResult{BridgeId: m.BridgeCall.GetBridgeId(), Result: result}}})
		case *pb.CallToolOutput_Result:
			out.Result = m.Result
		}
	}
	sendMu.Lock()
	_ = stream.CloseSend()
	sendMu.Unlock()
	if out.Result == nil {
		return nil, ErrNoResult
	}
	return out, nil
}

func cancelReason(ctx context.Context) string {
	cause := context.Cause(ctx)
	if cause == nil || errors.Is(cause, context.Canceled) {
		return "cancelled"
	}
	return cause.Error()
}
