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

	"github.com/idem-go/idem/internal/assert"
	"github.com/idem-go/idem/internal/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// refusing wraps a store whose Complete refuses, for good, every completion
// refuse says to (as DynamoDB refuses an item over 400 KB).
type refusing struct {
	idem.Store
	refuse func(c idem.Completion) bool
	calls  atomic.Int32
}

func (s *refusing) Complete(ctx context.Context, key, nonce string, c idem.Completion) error {
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
	s := &refusing{Store: mustMem(memstore.WithClock(clk.Now)), refuse: func(c idem.Completion) bool { return len(c.Result) > 1000 }}
	g := newGuard[string](t, s, idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond), idem.OnDuplicate(idem.Wait))
	var runs atomic.Int32
	big := strings.Repeat("x", 5000)
	fn := func(ctx context.Context) (string, error) { runs.Add(1); return big, nil }
	v, err := g.Do(context.Background(), "k", fn)
	require.NoError(t, err, "the record completed, without its result")
	assert.Equal(t, big, v)
	for range 2 { // past the threshold: a left-over claim would be taken over
		clk.Advance(150 * time.Millisecond)
		_, err = g.Do(context.Background(), "k", fn)
		assert.ErrorIs(t, err, idem.ErrResultUnavailable)
	}
	assert.Equal(t, int32(1), runs.Load(), "fn ran once")
	assert.Equal(t, int32(2), s.calls.Load(), "the refused completion, then the one without a result")
}

// A stored failure the store refuses for good is stored again with a short
// message and its type, so replays still get ErrPreviousFailure.
func TestRefusedFailureStoredShort(t *testing.T) {
	clk := storetest.NewClock()
	s := &refusing{Store: mustMem(memstore.WithClock(clk.Now)), refuse: func(c idem.Completion) bool { return c.Error != nil && len(c.Error.Message) > 300 }}
	g := newGuard[int](t, s, idem.OnFailure(idem.Lock), idem.WithTakeoverAfter(100*time.Millisecond), idem.WithHeartbeat(20*time.Millisecond))
	var runs atomic.Int32
	long := errors.New("declined: " + strings.Repeat("é", 1000))
	fn := func(ctx context.Context) (int, error) { runs.Add(1); return 0, long }
	_, err := g.Do(context.Background(), "k", fn)
	require.ErrorIs(t, err, long)
	assert.NotErrorIs(t, err, idem.ErrNotRecorded)
	clk.Advance(150 * time.Millisecond)
	_, err = g.Do(context.Background(), "k", fn)
	var se *idem.StoredError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "*errors.errorString", se.Type)
	assert.LessOrEqual(t, len(se.Message), 256)
	assert.True(t, strings.HasPrefix(se.Message, "declined: é"))
	assert.True(t, utf8.ValidString(se.Message))
	assert.Equal(t, int32(1), runs.Load())
}

// A failure message with a NUL byte or invalid UTF-8 (which PostgreSQL text
// refuses) is stored sanitised at the first try.
func TestFailureMessageSanitised(t *testing.T) {
	s := &refusing{Store: mustMem(), refuse: func(c idem.Completion) bool {
		return c.Error != nil && (strings.ContainsRune(c.Error.Message, 0) || !utf8.ValidString(c.Error.Message))
	}}
	g := newGuard[int](t, s, idem.OnFailure(idem.Lock))
	_, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 0, errors.New("bad\x00byte \xff") })
	require.Error(t, err)
	_, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { t.Fatal("ran again"); return 0, nil })
	var se *idem.StoredError
	require.ErrorAs(t, err, &se)
	assert.Equal(t, "bad\uFFFDbyte \uFFFD", se.Message)
	assert.Equal(t, int32(1), s.calls.Load())
}

type panicky struct{ N int }

func (panicky) MarshalJSON() ([]byte, error) { panic("encoder bug") }

// A result whose encoder panics is an unencodable result: the claim
// completes without it. (Before, Do panicked after fn's side effect and
// left the claim in progress for a takeover to run fn again.)
func TestEncoderPanicCompletesWithoutResult(t *testing.T) {
	var c idem.Counter
	g := newGuard[panicky](t, mustMem(), idem.WithObserver(&c))
	var runs atomic.Int32
	fn := func(ctx context.Context) (panicky, error) { runs.Add(1); return panicky{N: 7}, nil }
	v, err := g.Do(context.Background(), "k", fn)
	require.NoError(t, err)
	assert.Equal(t, 7, v.N)
	_, err = g.Do(context.Background(), "k", fn)
	assert.ErrorIs(t, err, idem.ErrResultUnavailable)
	assert.Contains(t, err.Error(), "encoder panicked: encoder bug")
	assert.Equal(t, int32(1), runs.Load())
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
	require.NoError(t, err, "the record read back carries this claim's outcome")
	assert.Equal(t, 5, v)
	assert.Equal(t, 1, inst.Count(storetest.OpGet))
	v, err = g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 6, nil })
	require.NoError(t, err)
	assert.Equal(t, 5, v)
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
	assert.Equal(t, 5, v)
	assert.ErrorIs(t, err, idem.ErrOutcomeUnknown)
	assert.NotErrorIs(t, err, idem.ErrNotRecorded)
	var ue *idem.OutcomeUnknownError
	assert.ErrorAs(t, err, &ue)
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
			assert.Equal(t, 5, v)
			assert.ErrorIs(t, err, idem.ErrNotRecorded)
			assert.NotErrorIs(t, err, idem.ErrOutcomeUnknown)
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
	require.ErrorIs(t, err, context.Canceled)
	var runs atomic.Int32
	v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { runs.Add(1); return 3, nil })
	require.NoError(t, err, "the cancelled call was released, not stored")
	assert.Equal(t, 3, v)
	assert.Equal(t, int32(1), runs.Load())

	_, err = g.Do(context.Background(), "own", func(ctx context.Context) (int, error) {
		return 0, context.DeadlineExceeded // fn's own downstream timeout
	})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	_, err = g.Do(context.Background(), "own", func(ctx context.Context) (int, error) { return 1, nil })
	assert.ErrorIs(t, err, idem.ErrPreviousFailure)
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
		require.NoError(t, err, name)
		v, err := g.Do(context.Background(), "k", func(ctx context.Context) (int, error) { return 2, nil }, idem.Payload(p[1]))
		require.NoError(t, err, name)
		assert.Equal(t, 1, v, name)
	}
}
