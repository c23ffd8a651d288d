package idemlambda_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/idemlambda"
	"github.com/idem-go/idem/storekit"
	"github.com/idem-go/idem/stores/memstore"
)

type order struct {
	OrderID string `json:"order_id"`
	Amount  int    `json:"amount"`
	Body    string `json:"body,omitempty"`
}

func newStore(t testing.TB) storekit.Store {
	t.Helper()
	st, err := memstore.New()
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestWrapKeysAndPayloads(t *testing.T) {
	var runs atomic.Int64
	h := func(ctx context.Context, o order) (string, error) {
		n := runs.Add(1)
		tok, _ := idem.FencingToken(ctx)
		return o.OrderID + "/" + string(rune('0'+n)) + "/" + string(rune('0'+tok)), nil
	}
	ctx := context.Background()
	cases := []struct {
		name string
		opts []idemlambda.Option
	}{
		{"path", []idemlambda.Option{idemlambda.WithKeyPath("order_id"), idemlambda.WithPayloadPath("amount")}},
		{"func", []idemlambda.Option{
			idemlambda.WithKey(func(o order) (string, error) { return o.OrderID, nil }),
			idemlambda.WithPayload(func(o order) (any, error) { return o.Amount, nil }),
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			runs.Store(0)
			f, err := idemlambda.Wrap(newStore(t), h, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			a, err := f(ctx, order{OrderID: "o1", Amount: 5})
			if err != nil {
				t.Fatal(err)
			}
			b, err := f(ctx, order{OrderID: "o1", Amount: 5})
			if err != nil || b != a {
				t.Fatalf("repeat: %q %v, want %q", b, err, a)
			}
			if _, err := f(ctx, order{OrderID: "o1", Amount: 6}); !errors.Is(err, idem.ErrPayloadMismatch) {
				t.Fatalf("other payload: %v, want ErrPayloadMismatch", err)
			}
			var nk *idemlambda.NoKeyError
			if _, err := f(ctx, order{Amount: 6}); !errors.Is(err, idemlambda.ErrNoKey) || !errors.As(err, &nk) {
				t.Fatalf("no key: %v, want ErrNoKey", err)
			}
			if runs.Load() != 1 {
				t.Fatalf("%d runs, want 1", runs.Load())
			}
		})
	}
}

func TestWrapDefaultKeyAndOptional(t *testing.T) {
	var runs atomic.Int64
	h := func(ctx context.Context, o order) (int64, error) { return runs.Add(1), nil }
	f, err := idemlambda.Wrap(newStore(t), h) // the whole event is the key
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	f(ctx, order{OrderID: "a"})
	f(ctx, order{OrderID: "a"})
	f(ctx, order{OrderID: "b"})
	if runs.Load() != 2 {
		t.Fatalf("%d runs for two events, want 2", runs.Load())
	}
	g, err := idemlambda.Wrap(newStore(t), h, idemlambda.WithKeyPath("order_id"), idemlambda.WithKeyOptional())
	if err != nil {
		t.Fatal(err)
	}
	runs.Store(0)
	g(ctx, order{})
	g(ctx, order{})
	if runs.Load() != 2 {
		t.Fatalf("events without a key, WithKeyOptional: %d runs, want 2 (unguarded)", runs.Load())
	}
}

func TestKeyPathPowertoolsFunctions(t *testing.T) {
	var runs atomic.Int64
	h := func(ctx context.Context, ev json.RawMessage) (int64, error) { return runs.Add(1), nil }
	f, err := idemlambda.Wrap(newStore(t), h, idemlambda.WithKeyPath("powertools_json(body).[user, item]"))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, ev := range []string{
		`{"body":"{\"user\":\"u1\",\"item\":7,\"note\":\"x\"}"}`,
		`{"body":"{\"item\":7,\"user\":\"u1\",\"note\":\"y\"}"}`,
	} {
		if _, err := f(ctx, json.RawMessage(ev)); err != nil {
			t.Fatal(err)
		}
	}
	if runs.Load() != 1 {
		t.Fatalf("%d runs, want 1: the key is [user, item]", runs.Load())
	}
	if _, err := f(ctx, json.RawMessage(`{"body":"not json"}`)); !errors.Is(err, idemlambda.ErrNoKey) {
		t.Fatalf("a body that is not JSON: %v, want ErrNoKey", err)
	}
}

func TestInvalidOptions(t *testing.T) {
	st := newStore(t)
	h := func(ctx context.Context, o order) (string, error) { return "", nil }
	sqsH := func(ctx context.Context, m events.SQSMessage) error { return nil }
	apiH := func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		return events.APIGatewayProxyResponse{}, nil
	}
	for name, err := range map[string]error{
		"bad path":            wrapErr(idemlambda.Wrap(st, h, idemlambda.WithKeyPath("order_id[["))),
		"empty path":          wrapErr(idemlambda.Wrap(st, h, idemlambda.WithKeyPath(""))),
		"bad payload path":    wrapErr(idemlambda.Wrap(st, h, idemlambda.WithPayloadPath("a.."))),
		"key of another type": wrapErr(idemlambda.Wrap(st, h, idemlambda.WithKey(func(s string) (string, error) { return s, nil }))),
		"two keys":            wrapErr(idemlambda.Wrap(st, h, idemlambda.WithKeyPath("a"), idemlambda.WithKey(func(o order) (string, error) { return "", nil }))),
		"nil key func":        wrapErr(idemlambda.Wrap(st, h, idemlambda.WithKey[order](nil))),
		"negative grace":      wrapErr(idemlambda.Wrap(st, h, idemlambda.WithDeadlineGrace(-time.Second))),
		"http for wrap":       wrapErr(idemlambda.Wrap(st, h, idemlambda.WithHTTP())),
		"nil option":          wrapErr(idemlambda.Wrap(st, h, nil)),
		"nil store":           wrapErr(idemlambda.Wrap[order, string](nil, h)),
		"nil handler":         wrapErr(idemlambda.Wrap[order, string](st, nil)),
		"guard option":        wrapErr(idemlambda.Wrap(st, h, idemlambda.WithGuard(idem.WithTTL(0)))),
		"sqs key type":        wrapErr(idemlambda.SQS(st, sqsH, idemlambda.WithKey(func(o order) (string, error) { return "", nil }))),
		"sqs http":            wrapErr(idemlambda.SQS(st, sqsH, idemlambda.WithHTTP())),
		"api key path":        wrapErr(idemlambda.APIGateway(st, apiH, idemlambda.WithKeyPath("a"))),
		"api http option":     wrapErr(idemlambda.APIGateway(st, apiH, idemlambda.WithHTTP(idemhttp.WithMaxBody(-1)))),
		"api lock":            wrapErr(idemlambda.APIGateway(st, apiH, idemlambda.WithGuard(idem.OnFailure(idem.Lock)))),
	} {
		if !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
}

func wrapErr[F any](_ F, err error) error { return err }

// TestClaimEndsWithDeadline: a claim made under a context with a deadline
// is alive until the deadline (a duplicate is in progress, even with a
// takeover threshold shorter than the invocation and heartbeats running)
// and dead once the deadline and the grace have passed, although its
// owner still heartbeats.
func TestClaimEndsWithDeadline(t *testing.T) {
	const grace = 50 * time.Millisecond
	var runs atomic.Int64
	release := make(chan struct{})
	defer close(release)
	h := func(ctx context.Context, o order) (int64, error) {
		n := runs.Add(1)
		if n == 1 {
			<-release // hangs past its deadline, as a handler Lambda would stop
		}
		return n, nil
	}
	// Two wrappers on one store: two execution environments (within one, a
	// Guard coalesces its own callers).
	st := newStore(t)
	wrap := func() func(context.Context, order) (int64, error) {
		f, err := idemlambda.Wrap(st, h, idemlambda.WithKeyPath("order_id"), idemlambda.WithDeadlineGrace(grace),
			idemlambda.WithGuard(idem.WithTakeoverAfter(150*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f, retry := wrap(), wrap()
	deadline := time.Now().Add(400 * time.Millisecond)
	ctx, cancel := context.WithDeadline(context.Background(), deadline)
	defer cancel()
	go f(ctx, order{OrderID: "o"})
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	var ran time.Time
	for {
		_, err := retry(context.Background(), order{OrderID: "o"})
		now := time.Now()
		if err == nil {
			ran = now
			break
		}
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatal(err)
		}
		if now.After(deadline.Add(5 * time.Second)) {
			t.Fatal("still in progress 5s after the deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
	after := ran.Sub(deadline)
	t.Logf("the retry ran %v after the deadline (grace %v)", after, grace)
	if after < grace-5*time.Millisecond {
		t.Fatalf("the retry ran %v after the deadline, before the grace had passed: a live claim was taken", after)
	}
	if after > grace+time.Second {
		t.Fatalf("the retry ran %v after the deadline, want within a second of deadline+grace", after)
	}
}

func TestClaimAfterDeadline(t *testing.T) {
	f, err := idemlambda.Wrap(newStore(t), func(ctx context.Context, o order) (int, error) { return 1, nil }, idemlambda.WithKeyPath("order_id"), idemlambda.WithDeadlineGrace(0))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel()
	if _, err := f(ctx, order{OrderID: "o"}); err == nil {
		t.Fatal("a call after its deadline ran")
	}
}

func sqsMsg(id, body string) events.SQSMessage {
	return events.SQSMessage{MessageId: id, Body: body}
}

func failures(r events.SQSEventResponse) []string {
	var ids []string
	for _, f := range r.BatchItemFailures {
		ids = append(ids, f.ItemIdentifier)
	}
	return ids
}

func TestSQS(t *testing.T) {
	ran := map[string]int{}
	h := func(ctx context.Context, m events.SQSMessage) error {
		ran[m.Body]++
		if strings.HasPrefix(m.Body, "fail") {
			return errors.New("failed")
		}
		return nil
	}
	f, err := idemlambda.SQS(newStore(t), h)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	batch := events.SQSEvent{Records: []events.SQSMessage{sqsMsg("1", "a"), sqsMsg("2", "fail-b"), sqsMsg("1", "a"), sqsMsg("3", "c")}}
	for round := 0; round < 2; round++ {
		resp, err := f(ctx, batch)
		if err != nil {
			t.Fatal(err)
		}
		if got := failures(resp); len(got) != 1 || got[0] != "2" {
			t.Fatalf("round %d: failures %v, want [2]", round, got)
		}
	}
	if ran["a"] != 1 || ran["c"] != 1 || ran["fail-b"] != 2 {
		t.Fatalf("runs %v", ran)
	}
	// The message ID with another body is refused, not run.
	resp, _ := f(ctx, events.SQSEvent{Records: []events.SQSMessage{sqsMsg("1", "z")}})
	if got := failures(resp); len(got) != 1 || ran["z"] != 0 {
		t.Fatalf("another body under a message ID: failures %v, runs %v", got, ran)
	}
}

func TestSQSFIFOStopsAtFailure(t *testing.T) {
	var order []string
	h := func(ctx context.Context, m events.SQSMessage) error {
		order = append(order, m.MessageId)
		if m.Body == "fail" {
			return errors.New("failed")
		}
		return nil
	}
	f, err := idemlambda.SQS(newStore(t), h)
	if err != nil {
		t.Fatal(err)
	}
	fifo := func(id, body string) events.SQSMessage {
		m := sqsMsg(id, body)
		m.Attributes = map[string]string{"MessageGroupId": "g"}
		return m
	}
	resp, _ := f(context.Background(), events.SQSEvent{Records: []events.SQSMessage{fifo("1", "a"), fifo("2", "fail"), fifo("3", "c")}})
	if got := failures(resp); strings.Join(got, ",") != "2,3" || strings.Join(order, ",") != "1,2" {
		t.Fatalf("failures %v, runs %v; want failures 2,3 and runs 1,2", got, order)
	}
}

func TestSQSKeyFromBody(t *testing.T) {
	runs := 0
	f, err := idemlambda.SQS(newStore(t), func(ctx context.Context, m events.SQSMessage) error { runs++; return nil },
		idemlambda.WithKeyPath("powertools_json(body).id"), idemlambda.WithPayloadPath("powertools_json(body).amount"))
	if err != nil {
		t.Fatal(err)
	}
	resp, _ := f(context.Background(), events.SQSEvent{Records: []events.SQSMessage{
		sqsMsg("m1", `{"id":"x","amount":1,"sent":1}`), sqsMsg("m2", `{"id":"x","amount":1,"sent":2}`), sqsMsg("m3", `{}`),
	}})
	if got := failures(resp); runs != 1 || len(got) != 1 || got[0] != "m3" {
		t.Fatalf("runs %d, failures %v; want 1 run and m3 (no key) failed", runs, got)
	}
}

func TestAPIGateway(t *testing.T) {
	var runs atomic.Int64
	proceed := make(chan struct{})
	h := func(ctx context.Context, r events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		n := runs.Add(1)
		if r.Body == "slow" {
			<-proceed
		}
		if r.Body == "error" {
			return events.APIGatewayProxyResponse{}, errors.New("boom")
		}
		return events.APIGatewayProxyResponse{
			StatusCode: 201, Headers: map[string]string{"content-type": "text/plain"},
			MultiValueHeaders: map[string][]string{"X-Two": {"1", "2"}},
			Body:              "created " + string(rune('0'+n)),
		}, nil
	}
	f, err := idemlambda.APIGateway(newStore(t), h, idemlambda.WithHTTP(idemhttp.WithPrincipal(func(r *http.Request) (string, error) {
		ev, ok := idemlambda.APIGatewayRequest(r.Context())
		if !ok {
			return "", errors.New("no event")
		}
		return ev.RequestContext.Identity.APIKey, nil
	})))
	if err != nil {
		t.Fatal(err)
	}
	req := func(key, body string) events.APIGatewayProxyRequest {
		r := events.APIGatewayProxyRequest{HTTPMethod: "POST", Path: "/p", Headers: map[string]string{"idempotency-key": key}, Body: body}
		r.RequestContext.Identity.APIKey = "k1"
		return r
	}
	ctx := context.Background()
	done := make(chan events.APIGatewayProxyResponse)
	go func() {
		r, _ := f(ctx, req("slow", "slow"))
		done <- r
	}()
	for runs.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	busy, err := f(ctx, req("slow", "slow"))
	if err != nil || busy.StatusCode != 409 || busy.Headers["Content-Type"] != "application/problem+json" {
		t.Fatalf("while in progress: %+v %v, want a 409 problem", busy, err)
	}
	close(proceed)
	first := <-done
	again, err := f(ctx, req("slow", "slow"))
	if err != nil || again.Headers[idemhttp.ReplayedHeader] != "true" {
		t.Fatalf("replay: %+v %v", again, err)
	}
	delete(again.Headers, idemhttp.ReplayedHeader)
	a, _ := json.Marshal(first)
	b, _ := json.Marshal(again)
	if string(a) != string(b) {
		t.Fatalf("replay %s, first %s", b, a)
	}
	if r, _ := f(ctx, req("slow", "other")); r.StatusCode != 422 {
		t.Fatalf("another body: %+v, want 422", r)
	}
	// A handler error is the invocation's error, and the key stays free.
	if _, err := f(ctx, req("e", "error")); err == nil || err.Error() != "boom" {
		t.Fatalf("handler error: %v, want boom", err)
	}
	if _, err := f(ctx, req("e", "error")); err == nil {
		t.Fatal("the retry of a failed request did not run the handler")
	}
	if n := runs.Load(); n != 3 {
		t.Fatalf("%d runs, want 3", n)
	}
	// Without a key: passes through.
	r := req("", "x")
	r.Headers = nil
	if resp, err := f(ctx, r); err != nil || resp.StatusCode != 201 {
		t.Fatalf("no key: %+v %v", resp, err)
	}
}

func TestAPIGatewayV2Binary(t *testing.T) {
	runs := 0
	f, err := idemlambda.APIGatewayV2(newStore(t), func(ctx context.Context, r events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		runs++
		return events.APIGatewayV2HTTPResponse{StatusCode: 200, Body: r.Body, IsBase64Encoded: r.IsBase64Encoded}, nil
	})
	if err != nil {
		t.Fatal(err)
	}
	req := events.APIGatewayV2HTTPRequest{RawPath: "/u", Headers: map[string]string{"idempotency-key": "k"}, Body: "/wA=", IsBase64Encoded: true}
	req.RequestContext.HTTP.Method = "POST"
	for i := 0; i < 2; i++ {
		resp, err := f(context.Background(), req)
		if err != nil || resp.Body != "/wA=" || !resp.IsBase64Encoded {
			t.Fatalf("response %d: %+v %v", i, resp, err)
		}
	}
	if runs != 1 {
		t.Fatalf("%d runs", runs)
	}
}

// TestStepsSurviveTheDeadline: an invocation that finished a step and then
// ran past its deadline leaves the step recorded: the retry replays it
// instead of running it again. (Only the claims of the call and of steps in
// flight end with the invocation; the call's steps epoch lives as long as
// the call.)
func TestStepsSurviveTheDeadline(t *testing.T) {
	var charges, attempts atomic.Int64
	release := make(chan struct{})
	defer close(release)
	h := func(ctx context.Context, o order) (int64, error) {
		n := attempts.Add(1)
		if _, err := idem.Step(ctx, "charge", func(context.Context) (int64, error) { return charges.Add(1), nil }); err != nil {
			return 0, err
		}
		if n == 1 {
			<-release // times out after its charge, as a handler Lambda would stop
		}
		return charges.Load(), nil
	}
	st := newStore(t)
	wrap := func() func(context.Context, order) (int64, error) {
		f, err := idemlambda.Wrap(st, h, idemlambda.WithKeyPath("order_id"), idemlambda.WithDeadlineGrace(20*time.Millisecond),
			idemlambda.WithGuard(idem.WithTakeoverAfter(150*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond)))
		if err != nil {
			t.Fatal(err)
		}
		return f
	}
	f, retry := wrap(), wrap()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	go f(ctx, order{OrderID: "o"})
	for charges.Load() == 0 {
		time.Sleep(time.Millisecond)
	}
	giveUp := time.Now().Add(10 * time.Second)
	for {
		_, err := retry(context.Background(), order{OrderID: "o"})
		if err == nil {
			break
		}
		if !errors.Is(err, idem.ErrInProgress) {
			t.Fatal(err)
		}
		if time.Now().After(giveUp) {
			t.Fatal("still in progress 10s after the deadline")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if n := charges.Load(); n != 1 {
		t.Fatalf("the charge step ran %d times, want once (the retry replays it)", n)
	}
}
