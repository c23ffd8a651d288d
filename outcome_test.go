package idem_test

import (
	"context"
	"errors"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// refusing wraps a store whose Complete refuses, for good, every completion
// refuse says to (as DynamoDB refuses an item over 400 KB).
type refusing struct {
	storekit.Store
	refuse func(c storekit.Completion) bool
	calls  atomic.Int32
}

func (s *refusing) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	s.calls.Add(1)
	if s.refuse(c) {
		return &idem.StoreError{Op: "complete", Err: errors.New("value too large"), Permanent: true}
	}
	return s.Store.Complete(ctx, key, nonce, c)
}

// A result the store refuses for good completes the record without it, as an
// unencodable result does: fn ran once, the first caller gets its value,
// replays get ErrResultUnavailable. (Before, the claim was left in progress
// with ErrNotRecorded and the next caller ran fn again after the threshold.)
func TestRefusedResultCompletesWithoutResult(t *testing.T) {
	clk := storetest.NewClock() // the store's time: past the threshold without sleeping
	s := &refusing{Store: mustMem(memstore.WithClock(clk.Now)), refuse: func(c storekit.Completion) bool { return len(c.Result) > 1000 }}
	g := newGuard[string](t, s, idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond), idem.OnDuplicate(idem.Wait))
	var runs atomic.Int32
	big := strings.Repeat("x", 5000)
	fn := func(ctx context.Context) (string, error) { runs.Add(1); return big, nil }
	v, err := g.Do(context.Background(), "k", fn)
	if err != nil {
		t.Fatalf("the record completed, without its result: unexpected error: %v", err)
	}
	if v != big {
		t.Errorf("got %v, want %v", v, big)
	}
	for range 2 { // past the threshold: a left-over claim would be taken over
		clk.Advance(150 * time.Millisecond)
		_, err = g.Do(context.Background(), "k", fn)
		if !errors.Is(err, idem.ErrResultUnavailable) {
			t.Errorf("got %v, want %v", err, idem.ErrResultUnavailable)
		}
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("fn ran once: got %v, want %v", got, int32(1))
	}
	if got := s.calls.Load(); got != int32(2) {
		t.Errorf("the refused completion, then the one without a result: got %v, want %v", got, int32(2))
	}
}

// A stored failure the store refuses for good is stored again with a short
// message and its type, so replays still get ErrPreviousFailure.
func TestRefusedFailureStoredShort(t *testing.T) {
	clk := storetest.NewClock()
	s := &refusing{Store: mustMem(memstore.WithClock(clk.Now)), refuse: func(c storekit.Completion) bool { return c.Error != nil && len(c.Error.Message) > 300 }}
	g := newGuard[int](t, s, idem.OnFailure(idem.Lock), idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond))
	var runs atomic.Int32
	long := errors.New("declined: " + strings.Repeat("é", 1000))
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, long }
	_, err := g.Do(context.Background(), "k", fn)
	if !errors.Is(err, long) {
		t.Fatalf("got %v, want %v", err, long)
	}
	if errors.Is(err, idem.ErrNotRecorded) {
		t.Errorf("got %v, must not match %v", err, idem.ErrNotRecorded)
	}
	clk.Advance(150 * time.Millisecond)
	_, err = g.Do(context.Background(), "k", fn)
	var se *idem.RecordedFailure
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a %T", err, se)
	}
	if se.Type != "*errors.errorString" {
		t.Errorf("got %v, want %v", se.Type, "*errors.errorString")
	}
	if got := len(se.Message); got > 256 {
		t.Errorf("got %v, want <= %v", got, 256)
	}
	if !strings.HasPrefix(se.Message, "declined: é") {
		t.Errorf("strings.HasPrefix(se.Message, \"declined: é\") is false")
	}
	if !utf8.ValidString(se.Message) {
		t.Errorf("utf8.ValidString(se.Message) is false")
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("got %v, want %v", got, int32(1))
	}
}

// A failure message with a NUL byte or invalid UTF-8 (which PostgreSQL text
// refuses) is stored sanitised at the first try.
func TestFailureMessageSanitised(t *testing.T) {
	s := &refusing{Store: mustMem(), refuse: func(c storekit.Completion) bool {
		return c.Error != nil && (strings.ContainsRune(c.Error.Message, 0) || !utf8.ValidString(c.Error.Message))
	}}
	g := newGuard[int](t, s, idem.OnFailure(idem.Lock))
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 0, errors.New("bad\x00byte \xff") })
	if err == nil {
		t.Fatalf("got no error")
	}
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { t.Fatal("ran again"); return 0, nil })
	var se *idem.RecordedFailure
	if !errors.As(err, &se) {
		t.Fatalf("got %v, want a %T", err, se)
	}
	if se.Message != "bad\uFFFDbyte \uFFFD" {
		t.Errorf("got %v, want %v", se.Message, "bad\uFFFDbyte \uFFFD")
	}
	if got := s.calls.Load(); got != int32(1) {
		t.Errorf("got %v, want %v", got, int32(1))
	}
}

type panicky struct{ N int }

func (panicky) MarshalJSON() ([]byte, error) { panic("encoder bug") }

// A result whose encoder panics is an unencodable result: the claim
// completes without it. (Before, Do panicked after fn's side effect and
// left the claim in progress for a takeover to run fn again.)
func TestEncoderPanicCompletesWithoutResult(t *testing.T) {
	var c eventCounter
	g := newGuard[panicky](t, mustMem(), idem.WithObserver(c.Observe))
	var runs atomic.Int32
	fn := func(ctx context.Context) (panicky, error) { runs.Add(1); return panicky{N: 7}, nil }
	v, err := g.Do(context.Background(), "k", fn)
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v.N != 7 {
		t.Errorf("got %v, want %v", v.N, 7)
	}
	_, err = g.Do(context.Background(), "k", fn)
	if !errors.Is(err, idem.ErrResultUnavailable) {
		t.Errorf("got %v, want %v", err, idem.ErrResultUnavailable)
	}
	if !strings.Contains(err.Error(), "encoder panicked: encoder bug") {
		t.Errorf("%q does not contain %q", err.Error(), "encoder panicked: encoder bug")
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("got %v, want %v", got, int32(1))
	}
}

// A completion the store applied but whose every reply was lost is found by
// reading the record back: the caller is told it was recorded. (Before:
// ErrNotRecorded, although replays returned the result.)
func TestCompletionAppliedReplyLost(t *testing.T) {
	inst := storetest.Instrument(mustMem())
	inst.After = func(ctx context.Context, op storetest.Op, key string, err error) error {
		if op == storetest.OpComplete {
			return errors.New("i/o timeout") // applied, reply lost
		}
		return err
	}
	g := newGuard[int](t, inst, idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond))
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 5, nil })
	if err != nil {
		t.Fatalf("the record read back carries this claim's outcome: unexpected error: %v", err)
	}
	if v != 5 {
		t.Errorf("got %v, want %v", v, 5)
	}
	if got := inst.Count(storetest.OpGet); got != 1 {
		t.Errorf("got %v, want %v", got, 1)
	}
	v, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 6, nil })
	if err != nil {
		t.Fatalf("unexpected error: %v", err)
	}
	if v != 5 {
		t.Errorf("got %v, want %v", v, 5)
	}
}

// When a completion may have been applied and the record cannot be read
// back, the caller is told the outcome is unknown, not that it was not
// recorded.
func TestCompletionOutcomeUnknown(t *testing.T) {
	inst := storetest.Instrument(mustMem())
	inst.After = func(ctx context.Context, op storetest.Op, key string, err error) error {
		if op == storetest.OpComplete || op == storetest.OpGet {
			return errors.New("i/o timeout")
		}
		return err
	}
	g := newGuard[int](t, inst, idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond))
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 5, nil })
	if v != 5 {
		t.Errorf("got %v, want %v", v, 5)
	}
	if !errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Errorf("got %v, want %v", err, idem.ErrOutcomeUnknown)
	}
	if errors.Is(err, idem.ErrNotRecorded) {
		t.Errorf("got %v, must not match %v", err, idem.ErrNotRecorded)
	}
	var ue *storekit.OutcomeUnknownError
	if !errors.As(err, &ue) {
		t.Errorf("got %v, want a %T", err, ue)
	}
}

// A completion that may have reached the store but did not land is fenced
// off: the claim is taken over once stale, then released, and the caller
// is told it was not recorded. A try that starts just before the claim
// goes stale and answers only after the fence's deadline (one slow store
// call) is followed by one more try, which finds the claim stale. (Before,
// the fence gave up at its deadline with ErrOutcomeUnknown.)
func TestFenceTriesAfterASlowAnswer(t *testing.T) {
	const takeover = 200 * time.Millisecond
	inst := storetest.Instrument(mustMem())
	inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpComplete {
			return errors.New("write: broken pipe") // may have been sent: never applied here
		}
		return nil
	}
	var claims atomic.Int32
	inst.After = func(ctx context.Context, op storetest.Op, key string, err error) error {
		// Claims: 1 the call's own, 2 the fence's takeover of it, 3 the
		// first try of the second fence (of the takeover's claim, whose
		// completion failed too): decided at once, answered past that
		// fence's whole window (takeover + heartbeat).
		if op == storetest.OpClaim && claims.Add(1) == 3 {
			time.Sleep(3 * takeover)
		}
		return err
	}
	g := newGuard[int](t, inst, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(40*time.Millisecond))
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 5, nil })
	if v != 5 {
		t.Errorf("got %v, want %v", v, 5)
	}
	if !errors.Is(err, idem.ErrNotRecorded) || errors.Is(err, idem.ErrOutcomeUnknown) {
		t.Fatalf("got %v, want %v only", err, idem.ErrNotRecorded)
	}
	if got := claims.Load(); got < 4 {
		t.Errorf("%d claims: want a try after the slow one", got)
	}
	sk, err := guardinfo.StorageKey(g, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := inst.Get(context.Background(), sk); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("record: %v, want it released", err)
	}
}

// Outcomes known not to be stored keep ErrNotRecorded: the store could not
// be reached at all, or the record read back still shows the claim.
func TestCompletionKnownNotRecorded(t *testing.T) {
	for name, failGet := range map[string]bool{"unreachable": true, "read back in progress": false} {
		t.Run(name, func(t *testing.T) {
			inst := storetest.Instrument(mustMem())
			inst.Before = func(ctx context.Context, op storetest.Op, key string) error {
				if op == storetest.OpComplete || (failGet && op == storetest.OpGet) {
					return &net.OpError{Op: "dial", Net: "tcp", Err: errors.New("connection refused")}
				}
				return nil
			}
			g := newGuard[int](t, inst, idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond))
			v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 5, nil })
			if v != 5 {
				t.Errorf("got %v, want %v", v, 5)
			}
			if !errors.Is(err, idem.ErrNotRecorded) {
				t.Errorf("got %v, want %v", err, idem.ErrNotRecorded)
			}
			if errors.Is(err, idem.ErrOutcomeUnknown) {
				t.Errorf("got %v, must not match %v", err, idem.ErrOutcomeUnknown)
			}
		})
	}
}

// Under Lock, fn giving up because its caller cancelled is not the key's
// failure: the claim is released and the next call runs. (Before, every
// call for the record's TTL got ErrPreviousFailure.) A context error of
// fn's own, while the caller still waits, is stored as before.
func TestCallerCancellationNotLocked(t *testing.T) {
	g := newGuard[int](t, mustMem(), idem.OnFailure(idem.Lock))
	ctx, cancel := context.WithCancel(context.Background())
	_, err := g.Do(ctx, "k", func(ctx context.Context) (int, error) {
		cancel()
		<-ctx.Done()
		return 0, ctx.Err()
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want %v", err, context.Canceled)
	}
	var runs atomic.Int32
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { runs.Add(1); return 3, nil })
	if err != nil {
		t.Fatalf("the cancelled call was released, not stored: unexpected error: %v", err)
	}
	if v != 3 {
		t.Errorf("got %v, want %v", v, 3)
	}
	if got := runs.Load(); got != int32(1) {
		t.Errorf("got %v, want %v", got, int32(1))
	}

	_, err = g.Do(context.Background(), "own", func(ctx context.Context) (int, error) {
		return 0, context.DeadlineExceeded // fn's own downstream timeout
	})
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("got %v, want %v", err, context.DeadlineExceeded)
	}
	_, err = g.Do(context.Background(), "own", func(ctx context.Context) (int, error) { return 1, nil })
	if !errors.Is(err, idem.ErrPreviousFailure) {
		t.Errorf("got %v, want %v", err, idem.ErrPreviousFailure)
	}
}

// Payloads that encode to the same canonical JSON are the same payload, as
// the Payload documentation says.
func TestPayloadCanonicalEquality(t *testing.T) {
	type pair struct {
		A int `json:"a"`
	}
	for name, p := range map[string][2]any{
		"1 and 1.0":          {1, 1.0},
		"nil map, nil slice": {map[string]int(nil), []int(nil)},
		"bytes and base64":   {[]byte("abc"), "YWJj"},
		"struct and map":     {pair{A: 1}, map[string]any{"a": 1}},
	} {
		g := newGuard[int](t, mustMem())
		_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 1, nil }, idem.Payload(p[0]))
		if err != nil {
			t.Fatalf("%v: unexpected error: %v", name, err)
		}
		v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil }, idem.Payload(p[1]))
		if err != nil {
			t.Fatalf("%v: unexpected error: %v", name, err)
		}
		if v != 1 {
			t.Errorf("%v: got %v, want %v", name, v, 1)
		}
	}
}
