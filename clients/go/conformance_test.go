package tether_test

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	tether "github.com/tether-dev/tether/clients/go"
	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

// The shared conformance suite (clients/conformance/scenarios.json, its step language in the
// README beside it), run with this package's public API against the live gateway named by
// TETHER_ADDRESS, TETHER_TOKEN_A and TETHER_TOKEN_B. TETHER_CONFORMANCE_MULTIPLEX=0 runs every
// tool call on a CallTool stream of its own instead of the client's shared Calls stream.

type suite struct {
	Suite     string     `json:"suite"`
	Scenarios []scenario `json:"scenarios"`
}

type scenario struct {
	Name  string           `json:"name"`
	Steps []map[string]any `json:"steps"`
}

type gatewayEnv struct{ address, tokenA, tokenB string }

func liveGateway(t *testing.T) gatewayEnv {
	t.Helper()
	address := os.Getenv("TETHER_ADDRESS")
	if address == "" {
		t.Skip("TETHER_ADDRESS is not set: these tests need a live gateway (scripts/clients-test.sh starts one)")
	}
	return gatewayEnv{address, os.Getenv("TETHER_TOKEN_A"), os.Getenv("TETHER_TOKEN_B")}
}

// dialOptions are the client options of every live test: multiplexed unless
// TETHER_CONFORMANCE_MULTIPLEX is 0.
func dialOptions() []grpc.DialOption {
	return []grpc.DialOption{tether.WithMultiplex(os.Getenv("TETHER_CONFORMANCE_MULTIPLEX") != "0")}
}

func scenariosFile() string {
	if f := os.Getenv("TETHER_CONFORMANCE_FILE"); f != "" {
		return f
	}
	return filepath.Join("..", "conformance", "scenarios.json")
}

func TestConformance(t *testing.T) {
	env := liveGateway(t)
	raw, err := os.ReadFile(scenariosFile())
	if err != nil {
		t.Fatal(err)
	}
	var s suite
	if err := json.Unmarshal(raw, &s); err != nil {
		t.Fatal(err)
	}
	if s.Suite != "tether-client-conformance" {
		t.Fatalf("%s is not a tether conformance suite", scenariosFile())
	}
	only := os.Getenv("TETHER_CONFORMANCE_ONLY")
	for _, sc := range s.Scenarios {
		if !strings.Contains(sc.Name, only) {
			continue
		}
		t.Run(sc.Name, func(t *testing.T) {
			r := &runner{env: env, vars: map[string]string{}, owners: map[string]string{}, clients: map[string]*tether.Client{}}
			r.token = env.tokenA
			defer r.cleanup(t)
			for i, step := range sc.Steps {
				resolved, err := r.substitute(step)
				if err == nil {
					err = r.step(resolved.(map[string]any))
				}
				if err != nil {
					t.Fatalf("step %d (%v): %v", i, step["op"], err)
				}
			}
		})
	}
}

type runner struct {
	env     gatewayEnv
	token   string
	vars    map[string]string
	owners  map[string]string
	clients map[string]*tether.Client
}

func (r *runner) client(token string) *tether.Client {
	if c, ok := r.clients[token]; ok {
		return c
	}
	c, err := tether.Dial(r.env.address, token, dialOptions()...)
	if err != nil {
		panic(err)
	}
	r.clients[token] = c
	return c
}

func (r *runner) cleanup(t *testing.T) {
	for name, runID := range r.vars {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		if err := r.client(r.owners[name]).DeleteRun(ctx, runID); err != nil && !tether.IsNotFound(err) {
			t.Errorf("cleanup of %s: %v", runID, err)
		}
		cancel()
	}
	for _, c := range r.clients {
		c.Close()
	}
}

func (r *runner) substitute(v any) (any, error) {
	switch x := v.(type) {
	case string:
		if strings.HasPrefix(x, "$") && len(x) > 1 {
			val, ok := r.vars[x[1:]]
			if !ok {
				return nil, fmt.Errorf("unbound variable %s", x)
			}
			return val, nil
		}
		return x, nil
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			s, err := r.substitute(e)
			if err != nil {
				return nil, err
			}
			out[i] = s
		}
		return out, nil
	case map[string]any:
		out := make(map[string]any, len(x))
		for k, e := range x {
			s, err := r.substitute(e)
			if err != nil {
				return nil, err
			}
			out[k] = s
		}
		return out, nil
	}
	return v, nil
}

func parse[T proto.Message](v any, m T) (T, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return m, err
	}
	return m, protojson.Unmarshal(b, m)
}

func str(m map[string]any, k, def string) string {
	if v, ok := m[k].(string); ok {
		return v
	}
	return def
}

func (r *runner) step(step map[string]any) error {
	op := step["op"].(string)
	if op == "useToken" {
		switch step["token"] {
		case "A":
			r.token = r.env.tokenA
		case "B":
			r.token = r.env.tokenB
		default:
			r.token = str(step, "literal", "")
		}
		return nil
	}
	expect, _ := step["expect"].(map[string]any)
	if expect == nil {
		expect = map[string]any{}
	}
	status := str(expect, "status", "OK")
	deadline := 60 * time.Second
	if ms, ok := step["deadlineMs"].(float64); ok {
		deadline = time.Duration(ms) * time.Millisecond
	}
	ctx, cancel := context.WithTimeout(context.Background(), deadline)
	defer cancel()
	value, err := r.perform(ctx, op, step)
	if err != nil {
		var te *tether.Error
		if !errors.As(err, &te) {
			return err
		}
		code := strings.ToUpper(codeName(te))
		if status == "OK" {
			return fmt.Errorf("expected OK, got %s: %s", code, te.Message)
		}
		if code != status {
			return fmt.Errorf("expected %s, got %s: %s", status, code, te.Message)
		}
		if want, ok := expect["detailsContains"].(string); ok && !strings.Contains(te.Message, want) {
			return fmt.Errorf("status message %q lacks %q", te.Message, want)
		}
		return nil
	}
	if status != "OK" {
		return fmt.Errorf("expected %s, the call succeeded", status)
	}
	if name, ok := step["as"].(string); ok && op == "createRun" {
		r.vars[name] = value.(*pb.Run).GetRunId()
		r.owners[name] = r.token
	}
	return verify(op, value, expect)
}

// codeName spells a gRPC code the way the scenarios do (NOT_FOUND, not NotFound).
func codeName(e *tether.Error) string {
	names := map[string]string{
		"OK": "OK", "Canceled": "CANCELLED", "Unknown": "UNKNOWN", "InvalidArgument": "INVALID_ARGUMENT",
		"DeadlineExceeded": "DEADLINE_EXCEEDED", "NotFound": "NOT_FOUND", "AlreadyExists": "ALREADY_EXISTS",
		"PermissionDenied": "PERMISSION_DENIED", "ResourceExhausted": "RESOURCE_EXHAUSTED",
		"FailedPrecondition": "FAILED_PRECONDITION", "Aborted": "ABORTED", "OutOfRange": "OUT_OF_RANGE",
		"Unimplemented": "UNIMPLEMENTED", "Internal": "INTERNAL", "Unavailable": "UNAVAILABLE",
		"DataLoss": "DATA_LOSS", "Unauthenticated": "UNAUTHENTICATED",
	}
	return names[e.Code.String()]
}

func (r *runner) perform(ctx context.Context, op string, step map[string]any) (any, error) {
	c := r.client(r.token)
	run := str(step, "run", "")
	switch op {
	case "createRun":
		req, err := parse(step["request"], &pb.CreateRunRequest{})
		if err != nil {
			return nil, err
		}
		return c.CreateRun(ctx, req)
	case "getRun":
		return c.GetRun(ctx, run)
	case "pauseRun":
		return c.PauseRun(ctx, run)
	case "resumeRun":
		return c.ResumeRun(ctx, run)
	case "forkRun":
		count := int32(1)
		if n, ok := step["count"].(float64); ok {
			count = int32(n)
		}
		return c.ForkRun(ctx, run, count)
	case "listRuns":
		return c.ListRuns(ctx)
	case "deleteRun":
		return nil, c.DeleteRun(ctx, run)
	case "listTools":
		var surface *pb.Surface
		if s, ok := step["surface"]; ok {
			var err error
			if surface, err = parse(s, &pb.Surface{}); err != nil {
				return nil, err
			}
		}
		return c.ListTools(ctx, run, surface)
	case "putFiles":
		files := map[string][]byte{}
		for k, v := range step["files"].(map[string]any) {
			files[k] = []byte(v.(string))
		}
		return c.PutFiles(ctx, run, str(step, "path", ""), files)
	case "getFiles":
		return c.GetTar(ctx, run, str(step, "path", ""))
	case "callTool":
		return r.callTool(ctx, c, step)
	}
	return nil, fmt.Errorf("unknown op %q", op)
}

func (r *runner) callTool(ctx context.Context, c *tether.Client, step map[string]any) (*tether.CallOutcome, error) {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	var (
		mu       sync.Mutex
		problems []string
		nq, nb   int
	)
	opts := tether.CallOptions{}
	if raw, ok := step["argumentsJson"].(string); ok {
		opts.ArgumentsJSON = &raw
	}
	if s, ok := step["surface"]; ok {
		surface, err := parse(s, &pb.Surface{})
		if err != nil {
			return nil, err
		}
		opts.Surface = surface
	}
	if answers, ok := step["answers"].([]any); ok {
		opts.OnQuestion = func(_ context.Context, q *pb.Question) (*pb.Answer, error) {
			mu.Lock()
			n := nq
			nq++
			mu.Unlock()
			if n >= len(answers) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("card %d (%q) beyond the %d answers", n+1, q.GetQuestion(), len(answers)))
				mu.Unlock()
				cancel(errors.New("unexpected question card"))
				return nil, nil
			}
			entry := answers[n].(map[string]any)
			if reason, ok := entry["cancel"].(string); ok {
				cancel(errors.New(reason))
				return nil, nil
			}
			return parse(entry, &pb.Answer{})
		}
	}
	if bridge, ok := step["bridge"].([]any); ok {
		opts.OnBridgeCall = func(_ context.Context, b *pb.BridgeCall) (*pb.ToolResult, error) {
			mu.Lock()
			n := nb
			nb++
			mu.Unlock()
			if n >= len(bridge) {
				mu.Lock()
				problems = append(problems, fmt.Sprintf("bridged call %d (%s) beyond the %d results", n+1, b.GetTool(), len(bridge)))
				mu.Unlock()
				cancel(errors.New("unexpected bridged call"))
				return nil, errors.New("unexpected bridged call")
			}
			return parse(bridge[n].(map[string]any)["result"], &pb.ToolResult{})
		}
	}
	if ms, ok := step["cancelAfterMs"].(float64); ok {
		reason := str(step, "cancelReason", "cancelled")
		timer := time.AfterFunc(time.Duration(ms)*time.Millisecond, func() { cancel(errors.New(reason)) })
		defer timer.Stop()
	}
	out, err := c.CallTool(ctx, str(step, "run", ""), str(step, "tool", ""), step["arguments"], opts)
	if err != nil {
		return nil, err
	}
	if len(problems) > 0 {
		return nil, errors.New(strings.Join(problems, "; "))
	}
	return out, nil
}

func jsonEqual(a, b any) bool { return reflect.DeepEqual(a, b) }

func strings_(v any) []string {
	var out []string
	if list, ok := v.([]any); ok {
		for _, e := range list {
			out = append(out, e.(string))
		}
	}
	return out
}

func verify(op string, value any, expect map[string]any) error {
	switch op {
	case "createRun", "getRun", "pauseRun", "resumeRun":
		run := value.(*pb.Run)
		if want, ok := expect["state"].(string); ok && run.GetState().String() != want {
			return fmt.Errorf("state %s, expected %s (error: %q)", run.GetState(), want, run.GetError())
		}
		if want, ok := expect["errorContains"].(string); ok && !strings.Contains(run.GetError(), want) {
			return fmt.Errorf("run error %q lacks %q", run.GetError(), want)
		}
	case "listRuns", "listTools":
		var names []string
		if op == "listRuns" {
			for _, r := range value.([]*pb.Run) {
				names = append(names, r.GetRunId())
			}
		} else {
			for _, t := range value.([]*pb.Tool) {
				names = append(names, t.GetName())
			}
		}
		has := map[string]bool{}
		for _, n := range names {
			has[n] = true
		}
		for _, n := range strings_(expect["includes"]) {
			if !has[n] {
				return fmt.Errorf("%s missing from %v", n, names)
			}
		}
		for _, n := range strings_(expect["excludes"]) {
			if has[n] {
				return fmt.Errorf("%s present in %v", n, names)
			}
		}
	case "putFiles":
		if want, ok := expect["filesWritten"].(float64); ok {
			if got := value.(*pb.PutFilesResponse).GetFilesWritten(); float64(got) != want {
				return fmt.Errorf("files_written %d, expected %v", got, want)
			}
		}
	case "getFiles":
		files, names, err := readTar(value.([]byte))
		if err != nil {
			return err
		}
		if want, ok := expect["files"].(map[string]any); ok {
			for p, content := range want {
				got, ok := files[p]
				if !ok {
					return fmt.Errorf("%s is not a regular file in the tar (%v)", p, sortedKeys(names))
				}
				if string(got) != content.(string) {
					return fmt.Errorf("%s holds %q, expected %q", p, got, content)
				}
			}
		}
		for _, p := range strings_(expect["absent"]) {
			if names[p] {
				return fmt.Errorf("%s is in the tar", p)
			}
		}
	case "callTool":
		return verifyOutcome(value.(*tether.CallOutcome), expect)
	}
	return nil
}

func sortedKeys(m map[string]bool) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func readTar(archive []byte) (map[string][]byte, map[string]bool, error) {
	files := map[string][]byte{}
	names := map[string]bool{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return files, names, nil
		}
		if err != nil {
			return nil, nil, err
		}
		name := tether.EntryName(hdr.Name)
		names[name] = true
		if hdr.Typeflag == tar.TypeReg {
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, nil, err
			}
			files[name] = data
		}
	}
}

func verifyOutcome(out *tether.CallOutcome, expect map[string]any) error {
	text := out.Text()
	if want, ok := expect["isError"].(bool); ok && out.IsError() != want {
		return fmt.Errorf("is_error %v, expected %v; text: %q", out.IsError(), want, text)
	}
	if want, ok := expect["textEquals"].(string); ok && text != want {
		return fmt.Errorf("text %q, expected %q", text, want)
	}
	for _, s := range strings_(expect["textContains"]) {
		if !strings.Contains(text, s) {
			return fmt.Errorf("text %q lacks %q", text, s)
		}
	}
	if want, ok := expect["structured"]; ok {
		var got any
		if sj := out.Result.GetStructuredJson(); sj != "" {
			if err := json.Unmarshal([]byte(sj), &got); err != nil {
				return fmt.Errorf("structured_json is not JSON: %v", err)
			}
		}
		if !jsonEqual(got, want) {
			return fmt.Errorf("structured %v, expected %v", got, want)
		}
	}
	if want, ok := expect["questions"].([]any); ok {
		if len(out.Questions) != len(want) {
			return fmt.Errorf("%d cards, expected %d", len(out.Questions), len(want))
		}
		for i, w := range want {
			q, wq := out.Questions[i], w.(map[string]any)
			where := fmt.Sprintf("card %d", i+1)
			if k, ok := wq["kind"].(string); ok && q.GetKind().String() != k {
				return fmt.Errorf("%s: kind %s, expected %s", where, q.GetKind(), k)
			}
			if s, ok := wq["questionContains"].(string); ok && !strings.Contains(q.GetQuestion(), s) {
				return fmt.Errorf("%s: question %q lacks %q", where, q.GetQuestion(), s)
			}
			if s, ok := wq["targetSpace"].(string); ok && q.GetTargetSpace() != s {
				return fmt.Errorf("%s: target_space %q, expected %q", where, q.GetTargetSpace(), s)
			}
			if _, ok := wq["options"]; ok {
				var labels []string
				for _, o := range q.GetOptions() {
					labels = append(labels, o.GetLabel())
				}
				if !reflect.DeepEqual(labels, strings_(wq["options"])) {
					return fmt.Errorf("%s: options %v, expected %v", where, labels, wq["options"])
				}
			}
			if s, ok := wq["rejectedReason"].(string); ok && q.GetRejectedReason() != s {
				return fmt.Errorf("%s: rejected_reason %q, expected %q", where, q.GetRejectedReason(), s)
			}
			if s, ok := wq["rejectedReasonContains"].(string); ok && !strings.Contains(q.GetRejectedReason(), s) {
				return fmt.Errorf("%s: rejected_reason %q lacks %q", where, q.GetRejectedReason(), s)
			}
		}
	}
	if want, ok := expect["bridgeCalls"].([]any); ok {
		if len(out.BridgeCalls) != len(want) {
			return fmt.Errorf("%d bridged calls, expected %d", len(out.BridgeCalls), len(want))
		}
		for i, w := range want {
			b, wb := out.BridgeCalls[i], w.(map[string]any)
			if s, ok := wb["tool"].(string); ok && b.GetTool() != s {
				return fmt.Errorf("bridged call %d: tool %q, expected %q", i+1, b.GetTool(), s)
			}
			if args, ok := wb["arguments"]; ok {
				var got any
				if err := json.Unmarshal([]byte(b.GetArgumentsJson()), &got); err != nil {
					return fmt.Errorf("bridged call %d: arguments are not JSON: %v", i+1, err)
				}
				if !jsonEqual(got, args) {
					return fmt.Errorf("bridged call %d: arguments %v, expected %v", i+1, got, args)
				}
			}
		}
	}
	return nil
}
