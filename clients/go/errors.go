package tether

import (
	"context"
	"errors"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// Error is a tether RPC that ended with a non-OK gRPC status: the call itself was refused
// (unknown run or tool, bad token, bad request). A tool that ran and failed is not an Error;
// it is a result with IsError set.
type Error struct {
	Code    codes.Code
	Message string
	// RetryAfter is how long to wait before trying again, when the gateway says so (a
	// RESOURCE_EXHAUSTED rate limit or a full line of waiting calls); zero otherwise.
	RetryAfter time.Duration
	// cause is the context's cause for a call that ended by its own context.
	cause error
}

func (e *Error) Error() string { return fmt.Sprintf("tether: %s: %s", e.Code, e.Message) }

// GRPCStatus lets status.Code and status.FromError read the code back.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

// Unwrap gives the context's cause of a cancelled call, so errors.Is(err, cause) holds.
func (e *Error) Unwrap() error { return e.cause }

// ErrNoResult means a CallTool stream ended without its one result: a broken contract.
var ErrNoResult = errors.New("tether: the CallTool stream ended without a result")

// Code returns the gRPC code of an error returned by this package (codes.OK for nil).
func Code(err error) codes.Code {
	var e *Error
	if errors.As(err, &e) {
		return e.Code
	}
	return status.Code(err)
}

// IsNotFound reports a NOT_FOUND error; another tenant's run is NOT_FOUND too.
func IsNotFound(err error) bool { return Code(err) == codes.NotFound }

func wrap(err error) error {
	if err == nil {
		return nil
	}
	if s, ok := status.FromError(err); ok {
		return &Error{Code: s.Code(), Message: s.Message(), RetryAfter: retryAfter(s)}
	}
	return err
}

// retryAfter reads google.rpc.RetryInfo from a status's details (the gateway sends it with
// RESOURCE_EXHAUSTED).
func retryAfter(s *status.Status) time.Duration {
	for _, d := range s.Proto().GetDetails() {
		info := &errdetails.RetryInfo{}
		if d.MessageIs(info) && d.UnmarshalTo(info) == nil {
			return info.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

// callError is the Error of one call of a Calls stream that failed on its own.
func callError(e *pb.CallError) *Error {
	return &Error{
		Code:       codes.Code(e.GetCode()),
		Message:    e.GetMessage(),
		RetryAfter: time.Duration(e.GetRetryAfterMs()) * time.Millisecond,
	}
}

// contextError is how a call that ended by its own context reports it: DEADLINE_EXCEEDED at
// the deadline, otherwise CANCELLED carrying the cancel's cause.
func contextError(err, cause error) *Error {
	if errors.Is(err, context.DeadlineExceeded) {
		return &Error{Code: codes.DeadlineExceeded, Message: err.Error(), cause: cause}
	}
	return &Error{Code: codes.Canceled, Message: cause.Error(), cause: cause}
}
