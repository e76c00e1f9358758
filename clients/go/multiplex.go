package tether

import (
	"context"
	"errors"
	"io"
	"strconv"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// WithMultiplex(false) gives every tool call a CallTool stream of its own instead of sharing
// the client's one Calls stream (the default). Pass it to Dial with the gRPC options.
func WithMultiplex(on bool) grpc.DialOption { return multiplexOption{on: on} }

type multiplexOption struct {
	grpc.EmptyDialOption
	on bool
}

var errClosed = &Error{Code: codes.Canceled, Message: "the client is closed"}

// errNoCallsRPC tells CallTool the gateway predates Calls: run the call on its own stream.
var errNoCallsRPC = errors.New("tether: the gateway has no Calls RPC")

// multiplexer carries a client's tool calls on one Calls stream, opened on the first call and
// again after a stream fails. It is safe for concurrent use.
type multiplexer struct {
	open func(context.Context) (pb.Gateway_CallsClient, error)

	mu      sync.Mutex
	current *callsStream // nil until a call needs one
	opening *opening     // the stream being opened, if any
	noCalls bool         // the gateway answered UNIMPLEMENTED: one CallTool stream per call
	closed  bool
	lastID  uint64
}

// callsStream is one Calls stream and the calls in flight on it.
type callsStream struct {
	stream pb.Gateway_CallsClient
	drop   context.CancelFunc
	// grpc-go streams take one sender at a time.
	sendMu sync.Mutex
	// calls in flight by envelope id, guarded by multiplexer.mu.
	calls map[string]*inbox
	ended chan struct{}
	err   error // why the stream ended (nil: it ended OK); set before ended closes
}

// inbox queues one call's messages so that a slow handler of one call never holds up the
// stream's reader, and so the other calls.
type inbox struct {
	mu    sync.Mutex
	queue []*pb.CallsOutput
	wake  chan struct{}
}

func (b *inbox) put(m *pb.CallsOutput) {
	b.mu.Lock()
	b.queue = append(b.queue, m)
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *inbox) take() []*pb.CallsOutput {
	b.mu.Lock()
	defer b.mu.Unlock()
	q := b.queue
	b.queue = nil
	return q
}

func (s *callsStream) send(in *pb.CallsInput) {
	s.sendMu.Lock()
	defer s.sendMu.Unlock()
	// A failed send means the stream ended; the reader reports how.
	_ = s.stream.Send(in)
}

// call runs one call on the shared stream, or returns errNoCallsRPC when the gateway has no
// Calls RPC.
func (m *multiplexer) call(ctx context.Context, start *pb.CallToolInput, opts *CallOptions) (*CallOutcome, error) {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return nil, contextError(ctx.Err(), context.Cause(ctx))
	}
	s, id, box, err := m.register(ctx)
	if err != nil {
		return nil, err
	}
	send := func(in *pb.CallToolInput) { s.send(&pb.CallsInput{CallId: id, Input: in}) }
	s.send(&pb.CallsInput{CallId: id, Input: start, Traceparent: traceparent(ctx)})
	call := &callState{ctx: ctx, opts: opts, send: send}

	ctxDone := ctx.Done()
	var grace <-chan time.Time
	streamEnded := false
	for {
		select {
		case <-box.wake:
		case <-s.ended:
			// Everything the stream delivered is in the inbox by now: take it before failing.
			streamEnded = true
		case <-ctxDone:
			ctxDone = nil
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				call.cancel("deadline exceeded")
				m.forget(s, id)
				return nil, contextError(ctx.Err(), context.Cause(ctx))
			}
			// As on a stream of its own: the gateway stops the tool and still sends the result.
			call.cancel(cancelReason(ctx))
			timer := time.NewTimer(opts.cancelGrace())
			defer timer.Stop()
			grace = timer.C
			continue
		case <-grace:
			m.forget(s, id)
			return nil, contextError(ctx.Err(), context.Cause(ctx))
		}
		for _, msg := range box.take() {
			if e := msg.GetError(); e != nil {
				return nil, callError(e)
			}
			if call.handle(msg.GetOutput()) {
				return &call.out, nil
			}
		}
		if streamEnded {
			return nil, m.failure(s)
		}
	}
}

// register enrols a call on the current stream, opening one when there is none. Opening waits
// for the connection, so it runs aside: a caller whose ctx ends meanwhile stops waiting.
func (m *multiplexer) register(ctx context.Context) (*callsStream, string, *inbox, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for {
		switch {
		case m.noCalls:
			return nil, "", nil, errNoCallsRPC
		case m.closed:
			return nil, "", nil, errClosed
		case m.current != nil:
			m.lastID++
			id := strconv.FormatUint(m.lastID, 10)
			box := &inbox{wake: make(chan struct{}, 1)}
			m.current.calls[id] = box
			return m.current, id, box, nil
		}
		if m.opening == nil {
			m.opening = &opening{done: make(chan struct{})}
			go m.openStream(m.opening)
		}
		op := m.opening
		m.mu.Unlock()
		select {
		case <-op.done:
		case <-ctx.Done():
			m.mu.Lock()
			return nil, "", nil, contextError(ctx.Err(), context.Cause(ctx))
		}
		m.mu.Lock()
		if op.err != nil {
			return nil, "", nil, op.err
		}
		if m.current == nil {
			// The new stream ended before this call could join it (and then no call did).
			return nil, "", nil, m.failure(op.stream)
		}
	}
}

// opening is a Calls stream on its way.
type opening struct {
	done   chan struct{}
	stream *callsStream
	err    error
}

func (m *multiplexer) openStream(op *opening) {
	ctx, drop := context.WithCancel(context.Background())
	stream, err := m.open(ctx)
	m.mu.Lock()
	m.opening = nil
	switch {
	case err != nil:
		drop()
		op.err = wrap(err)
	case m.closed:
		drop()
		op.err = errClosed
	default:
		op.stream = &callsStream{stream: stream, drop: drop, calls: map[string]*inbox{}, ended: make(chan struct{})}
		m.current = op.stream
		go m.read(op.stream)
	}
	m.mu.Unlock()
	close(op.done)
}

// read hands each message to its call until the stream ends, then ends every call in flight.
func (m *multiplexer) read(s *callsStream) {
	for {
		msg, err := s.stream.Recv()
		if err != nil {
			m.end(s, err)
			return
		}
		id := msg.GetCallId()
		m.mu.Lock()
		box := s.calls[id]
		if msg.GetError() != nil || msg.GetOutput().GetResult() != nil {
			delete(s.calls, id) // the call is over; the gateway may reuse nothing of it
		}
		m.mu.Unlock()
		// A message for a call that ended here (deadline, cancel grace) is dropped.
		if box != nil {
			box.put(msg)
		}
	}
}

func (m *multiplexer) end(s *callsStream, err error) {
	if errors.Is(err, io.EOF) {
		err = nil
	}
	m.mu.Lock()
	if m.current == s {
		m.current = nil
	}
	if status.Code(err) == codes.Unimplemented {
		m.noCalls = true
	}
	s.err = err
	s.calls = nil
	m.mu.Unlock()
	s.drop()
	close(s.ended)
}

// failure is what a call in flight on a stream that ended returns.
func (m *multiplexer) failure(s *callsStream) error {
	switch {
	case s.err == nil:
		return ErrNoResult
	case status.Code(s.err) == codes.Unimplemented:
		// The gateway never saw the call: it runs again on a stream of its own.
		return errNoCallsRPC
	}
	return wrap(s.err)
}

func (m *multiplexer) forget(s *callsStream, id string) {
	m.mu.Lock()
	delete(s.calls, id)
	m.mu.Unlock()
}

// close half-closes the shared stream and drops it; calls still in flight end CANCELLED.
func (m *multiplexer) close() {
	m.mu.Lock()
	m.closed = true
	s := m.current
	m.mu.Unlock()
	if s == nil {
		return
	}
	s.sendMu.Lock()
	_ = s.stream.CloseSend()
	s.sendMu.Unlock()
	s.drop()
}

// traceparent is the W3C trace context the caller put in ctx's outgoing metadata, which a
// CallTool stream would carry as a header.
func traceparent(ctx context.Context) string {
	md, _ := metadata.FromOutgoingContext(ctx)
	if v := md.Get("traceparent"); len(v) > 0 {
		return v[0]
	}
	return ""
}
