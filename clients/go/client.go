// Package tether is a Go client for the tether gateway (gRPC contract tether.v1): runs, files,
// and tool calls with question cards, approvals, bridged calls and context-based cancellation.
// The generated messages live in the tetherv1 package.
package tether

import (
	"context"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/metadata"

	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

const maxMessage = 64 << 20

// Client is one tenant's connection to a gateway. It is safe for concurrent use.
type Client struct {
	conn  *grpc.ClientConn
	rpc   pb.GatewayClient
	token string
	// calls is the shared Calls stream of tool calls; nil with WithMultiplex(false).
	calls *multiplexer
}

// Dial connects to a gateway at host:port with a bearer token (plaintext gRPC unless opts say
// otherwise). The connection is made lazily on the first call. Tool calls share one Calls
// stream unless opts include WithMultiplex(false).
func Dial(address, token string, opts ...grpc.DialOption) (*Client, error) {
	dialOpts := []grpc.DialOption{
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(maxMessage), grpc.MaxCallSendMsgSize(maxMessage)),
	}
	multiplex := true
	for _, o := range opts {
		if m, ok := o.(multiplexOption); ok {
			multiplex = m.on
			continue
		}
		dialOpts = append(dialOpts, o)
	}
	conn, err := grpc.NewClient(address, dialOpts...)
	if err != nil {
		return nil, err
	}
	c := &Client{conn: conn, rpc: pb.NewGatewayClient(conn), token: token}
	if multiplex {
		c.calls = &multiplexer{open: func(ctx context.Context) (pb.Gateway_CallsClient, error) {
			return c.rpc.Calls(c.Authorize(ctx))
		}}
	}
	return c, nil
}

// Close ends the shared Calls stream (calls still in flight end CANCELLED) and closes the
// connection.
func (c *Client) Close() error {
	if c.calls != nil {
		c.calls.close()
	}
	return c.conn.Close()
}

// Health is the gateway's health status for service ("SERVING", "NOT_SERVING", …; the gateway's
// own service when service is empty) over this client's connection. It needs no token.
func (c *Client) Health(ctx context.Context, service string) (string, error) {
	if service == "" {
		service = "tether.v1.Gateway"
	}
	res, err := healthpb.NewHealthClient(c.conn).Check(ctx, &healthpb.HealthCheckRequest{Service: service})
	if err != nil {
		return "", wrap(err)
	}
	return res.GetStatus().String(), nil
}

// Raw is the generated stub, for RPCs this wrapper does not cover (WatchWorkers, ReportWorker).
// Pass contexts through Authorize.
func (c *Client) Raw() pb.GatewayClient { return c.rpc }

// Authorize adds this client's bearer token to a context for use with Raw.
func (c *Client) Authorize(ctx context.Context) context.Context {
	return metadata.AppendToOutgoingContext(ctx, "authorization", "Bearer "+c.token)
}

// CreateRun starts a run. A nil request creates a run with the server's defaults.
func (c *Client) CreateRun(ctx context.Context, req *pb.CreateRunRequest) (*pb.Run, error) {
	if req == nil {
		req = &pb.CreateRunRequest{}
	}
	run, err := c.rpc.CreateRun(c.Authorize(ctx), req)
	return run, wrap(err)
}

// GetRun returns one of the tenant's runs; another tenant's run is NOT_FOUND.
func (c *Client) GetRun(ctx context.Context, runID string) (*pb.Run, error) {
	run, err := c.rpc.GetRun(c.Authorize(ctx), &pb.GetRunRequest{RunId: runID})
	return run, wrap(err)
}

// ListRuns lists the tenant's runs.
func (c *Client) ListRuns(ctx context.Context) ([]*pb.Run, error) {
	res, err := c.rpc.ListRuns(c.Authorize(ctx), &pb.ListRunsRequest{})
	if err != nil {
		return nil, wrap(err)
	}
	return res.GetRuns(), nil
}

// GetEgressLog returns one page of the tenant's egress log (of one run, when runID is set),
// oldest first; pass the previous page's NextPageToken for the next.
func (c *Client) GetEgressLog(ctx context.Context, runID string, pageSize int32, pageToken string) (*pb.GetEgressLogResponse, error) {
	res, err := c.rpc.GetEgressLog(c.Authorize(ctx), &pb.GetEgressLogRequest{RunId: runID, PageSize: pageSize, PageToken: pageToken})
	return res, wrap(err)
}

// EgressLog returns every record of the tenant's egress log (of one run, when runID is set).
func (c *Client) EgressLog(ctx context.Context, runID string) ([]*pb.EgressRecord, error) {
	var records []*pb.EgressRecord
	token := ""
	for {
		page, err := c.GetEgressLog(ctx, runID, 1000, token)
		if err != nil {
			return records, err
		}
		records = append(records, page.GetRecords()...)
		if token = page.GetNextPageToken(); token == "" {
			return records, nil
		}
	}
}

// DeleteRun stops the run and removes its workspace.
func (c *Client) DeleteRun(ctx context.Context, runID string) error {
	_, err := c.rpc.DeleteRun(c.Authorize(ctx), &pb.DeleteRunRequest{RunId: runID})
	return wrap(err)
}

// PauseRun keeps what of the run is data and lets go of its sandbox; the next call resumes it.
func (c *Client) PauseRun(ctx context.Context, runID string) (*pb.Run, error) {
	run, err := c.rpc.PauseRun(c.Authorize(ctx), &pb.PauseRunRequest{RunId: runID})
	return run, wrap(err)
}

// ResumeRun brings a paused run back before its next call needs it; a ready run is returned as it is.
func (c *Client) ResumeRun(ctx context.Context, runID string) (*pb.Run, error) {
	run, err := c.rpc.ResumeRun(c.Authorize(ctx), &pb.ResumeRunRequest{RunId: runID})
	return run, wrap(err)
}

// ForkRun makes count new runs that start from the run's state now; the run goes on.
func (c *Client) ForkRun(ctx context.Context, runID string, count int32) ([]*pb.Run, error) {
	res, err := c.rpc.ForkRun(c.Authorize(ctx), &pb.ForkRunRequest{RunId: runID, Count: count})
	if err != nil {
		return nil, wrap(err)
	}
	return res.GetRuns(), nil
}

// ListTools lists the tools the given surface may see (nil: the default surface).
func (c *Client) ListTools(ctx context.Context, runID string, surface *pb.Surface) ([]*pb.Tool, error) {
	res, err := c.rpc.ListTools(c.Authorize(ctx), &pb.ListToolsRequest{RunId: runID, Surface: surface})
	if err != nil {
		return nil, wrap(err)
	}
	return res.GetTools(), nil
}
