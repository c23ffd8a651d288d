package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

// fault is what lossyHTTP does to a request it matches.
type fault int

const (
	pass     fault = iota // send it and return the reply
	lose                  // send it, let DynamoDB apply it, then fail as if the connection was reset
	loseOnce              // lose, once, then pass
	drop                  // fail before sending: the request never reaches DynamoDB
	refuse                // fail as a refused connection (a dial error: known not sent)
)

// lossyHTTP is the SDK's HTTP client with faults injected per request kind:
// a completion (an UpdateItem that sets completed_at) and a read
// (GetItem). Everything else passes.
type lossyHTTP struct {
	next                 *http.Client
	completion, read     atomic.Int32 // a fault
	completions, reads   atomic.Int32 // matched requests, every attempt
	appliedButReplyLost  atomic.Int32 // completions sent and applied whose reply was lost
	completionsNeverSent atomic.Int32
}

func (l *lossyHTTP) Do(req *http.Request) (*http.Response, error) {
	var f fault
	switch req.Header.Get("X-Amz-Target") {
	case "DynamoDB_20120810.UpdateItem":
		body, err := io.ReadAll(req.Body)
		if err != nil {
			return nil, err
		}
		_ = req.Body.Close()
		req.Body = io.NopCloser(bytes.NewReader(body))
		req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		if !bytes.Contains(body, []byte("#ca = :now")) { // not Complete's update
			return l.next.Do(req)
		}
		l.completions.Add(1)
		f = fault(l.completion.Load())
		if f == loseOnce && l.completion.CompareAndSwap(int32(loseOnce), int32(pass)) {
			f = lose
		}
	case "DynamoDB_20120810.GetItem":
		l.reads.Add(1)
		f = fault(l.read.Load())
	default:
		return l.next.Do(req)
	}
	reset := &net.OpError{Op: "read", Net: "tcp", Err: syscall.ECONNRESET}
	switch f {
	case lose:
		resp, err := l.next.Do(req)
		if err != nil {
			return nil, err
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			l.appliedButReplyLost.Add(1)
		}
		return nil, reset
	case drop:
		l.completionsNeverSent.Add(1)
		return nil, &net.OpError{Op: "write", Net: "tcp", Err: syscall.EPIPE}
	case refuse:
		l.completionsNeverSent.Add(1)
		return nil, &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	}
	return l.next.Do(req)
}

// TestCompletionReplyLostIsReadBack: when the fate of a completion is not
// known (its replies were lost), the Guard reads the record back before it
// answers. A completion DynamoDB applied gives the caller its result with no
// error and the record holds it; one that never reached DynamoDB is
// ErrNotRecorded; one that may have been applied while the read-back fails
// too is ErrOutcomeUnknown, never ErrNotRecorded.
func TestCompletionReplyLostIsReadBack(t *testing.T) {
	for _, tc := range []replyLostCase{
		// The SDK's retry of an applied completion is applied again (its
		// condition is the nonce only), so the caller is answered at once.
		{"applied, first reply lost", loseOnce, pass, nil, storekit.StatusCompleted, 3},
		// Every reply lost until the Guard gives up: it reads the record
		// back and finds its outcome.
		{"applied, reply lost", lose, pass, nil, storekit.StatusCompleted, 3},
		// Never sent: the Guard fences the claim off (a late completion can
		// no longer land) and releases it, so "not recorded" is true and the
		// record reads as gone.
		{"never sent, read back in progress", drop, pass, storekit.ErrNotRecorded, "", 3},
		{"applied, reply lost, read-back fails", lose, drop, storekit.ErrOutcomeUnknown, storekit.StatusCompleted, 3},
		// Every attempt refused at dial, so nothing can have been applied.
		// Without the SDK's own retries: a deadline that falls in the
		// SDK's backoff ends the call with a context error, which does not
		// say that nothing was sent, and the answer is ErrOutcomeUnknown.
		{"refused connection, read-back fails", refuse, refuse, storekit.ErrNotRecorded, storekit.StatusInProgress, 1},
	} {
		t.Run(tc.name, tc.run)
	}
}

// A replyLostCase is a fault on the completion and on the read-back after
// it, and what the caller and the record end up with.
type replyLostCase struct {
	name             string
	completion, read fault
	wantErr          error // nil: recorded, no error
	wantStatus       storekit.Status
	sdkAttempts      int
}

func (tc replyLostCase) run(t *testing.T) {
	e := newEnv(t)
	lossy := &lossyHTTP{next: &http.Client{Timeout: 5 * time.Second}}
	g := tc.lossyGuard(t, e, lossy)
	const key = "lost"
	sk, err := guardinfo.StorageKey(g, key)
	if err != nil {
		t.Fatal(err)
	}

	var runs atomic.Int32
	v, err := g.Do(context.Background(), key, func(ctx context.Context) (int, error) {
		runs.Add(1)
		lossy.completion.Store(int32(tc.completion))
		lossy.read.Store(int32(tc.read))
		return 7, nil
	})
	lossy.completion.Store(int32(pass))
	lossy.read.Store(int32(pass))
	if v != 7 {
		t.Fatalf("Do returned %d, want fn's 7", v)
	}
	tc.checkAnswer(t, err)
	tc.checkFaultsHit(t, lossy)

	rec, err := e.store.Get(context.Background(), sk) // straight to DynamoDB Local
	if tc.wantStatus == "" {
		if !errors.Is(err, storekit.ErrNotFound) {
			t.Fatalf("record %+v, %v; want it released", rec, err)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if rec.Status != tc.wantStatus {
		t.Fatalf("record %+v, want status %s", rec, tc.wantStatus)
	}
	if tc.wantStatus == storekit.StatusCompleted {
		if string(rec.Result) != "7" {
			t.Fatalf("completed record holds %q, want 7", rec.Result)
		}
		v, err := g.Do(context.Background(), key, func(ctx context.Context) (int, error) { runs.Add(1); return 8, nil })
		if err != nil || v != 7 || runs.Load() != 1 {
			t.Fatalf("replay: %d, %v, %d runs; want 7 from one run", v, err, runs.Load())
		}
	}
}

// lossyGuard is a Guard on e's table whose client sends through lossy,
// with the case's SDK attempts.
func (tc replyLostCase) lossyGuard(t *testing.T, e *env, lossy *lossyHTTP) *idem.Guard[int] {
	client := newClient(clientConfig{endpoint: e.endpoint, extra: []func(*dynamodb.Options){
		func(o *dynamodb.Options) {
			o.HTTPClient = lossy
			o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
				so.MaxAttempts = tc.sdkAttempts
				so.MaxBackoff = 20 * time.Millisecond
				so.RateLimiter = ratelimit.None
			})
		},
	}})
	s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(e.prefix))
	// The read-back after the last failed completion is bounded by the
	// heartbeat: 1s leaves DynamoDB Local room for a slow answer (250ms
	// did not, once, under a CI run).
	return newGuard[int](t, s, idem.WithTakeoverAfter(2*time.Second), idem.WithHeartbeat(time.Second))
}

// checkAnswer checks Do's error is the case's, and never both
// ErrNotRecorded and ErrOutcomeUnknown.
func (tc replyLostCase) checkAnswer(t *testing.T, err error) {
	t.Helper()
	switch {
	case tc.wantErr == nil && err != nil:
		t.Fatalf("Do: %v; want no error (the record holds the outcome)", err)
	case tc.wantErr != nil && !errors.Is(err, tc.wantErr):
		t.Fatalf("Do: %v; want %v", err, tc.wantErr)
	case errors.Is(err, storekit.ErrNotRecorded) && errors.Is(err, storekit.ErrOutcomeUnknown):
		t.Fatalf("Do: %v matches both ErrNotRecorded and ErrOutcomeUnknown", err)
	}
}

// checkFaultsHit checks the case's faults did happen, so the test proved
// something.
func (tc replyLostCase) checkFaultsHit(t *testing.T, lossy *lossyHTTP) {
	t.Helper()
	if tc.completion != loseOnce && (lossy.completions.Load() == 0 || lossy.reads.Load() == 0) {
		t.Fatalf("%d completions and %d reads went through the faulty client; want both (the read-back)",
			lossy.completions.Load(), lossy.reads.Load())
	}
	if (tc.completion == lose || tc.completion == loseOnce) && lossy.appliedButReplyLost.Load() == 0 {
		t.Fatal("no completion was applied with its reply lost")
	}
	if (tc.completion == drop || tc.completion == refuse) && lossy.completionsNeverSent.Load() == 0 {
		t.Fatal("no completion was kept from DynamoDB")
	}
}
