package tether

import (
	"errors"
	"fmt"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// Error is a tether RPC that ended with a non-OK gRPC status: the call itself was refused
// (unknown run or tool, bad token, bad request). A tool that ran and failed is not an Error;
// it is a result with IsError set.
type Error struct {
	Code    codes.Code
	Message string
}

func (e *Error) Error() string { return fmt.Sprintf("tether: %s: %s", e.Code, e.Message) }

// GRPCStatus lets status.Code and status.FromError read the code back.
func (e *Error) GRPCStatus() *status.Status { return status.New(e.Code, e.Message) }

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
		return &Error{Code: s.Code(), Message: s.Message()}
	}
	return err
}
