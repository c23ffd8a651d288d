package idemmsg_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmsg"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

func newDedup(t *testing.T, opts ...idemmsg.Option) (*idemmsg.Dedup, *storetest.Instrumented) {
	t.Helper()
	ms, err := memstore.New()
	require.NoError(t, err)
	s := storetest.Instrument(ms)
	d, err := idemmsg.New(s, opts...)
	require.NoError(t, err)
	return d, s
}

func TestDecisions(t *testing.T) {
	ctx := context.Background()
	d, s := newDedup(t, idemmsg.WithBusyDelay(250*time.Millisecond))
	var runs atomic.Int64
	ok := func(context.Context) error { runs.Add(1); return nil }

	r := d.Handle(ctx, "m1", []byte("body"), ok)
	assert.Equal(t, idemmsg.Result{Action: idemmsg.Ack, Ran: true}, r)
	r = d.Handle(ctx, "m1", []byte("body"), ok)
	assert.Equal(t, idemmsg.Result{Action: idemmsg.Ack, Replayed: true}, r, "a redelivery is acked without running")
	assert.EqualValues(t, 1, runs.Load())

	r = d.Handle(ctx, "m1", []byte("other body"), ok)
	assert.Equal(t, idemmsg.Reject, r.Action, "same key, another body")
	assert.ErrorIs(t, r.Err, idem.ErrPayloadMismatch)
	assert.EqualValues(t, 1, runs.Load(), "never run")

	// A handler error: retried at once, and the redelivery runs again.
	boom := errors.New("boom")
	r = d.Handle(ctx, "m2", nil, func(context.Context) error { runs.Add(1); return boom })
	assert.Equal(t, idemmsg.Retry, r.Action)
	assert.Zero(t, r.Delay)
	assert.ErrorIs(t, r.Err, boom)
	r = d.Handle(ctx, "m2", nil, ok)
	assert.Equal(t, idemmsg.Ack, r.Action)
	assert.True(t, r.Ran)

	// The same key running elsewhere: retried after the busy delay.
	started, release, finished := make(chan struct{}), make(chan struct{}), make(chan struct{})
	go func() {
		defer close(finished)
		d.Handle(ctx, "m3", nil, func(context.Context) error { close(started); <-release; return nil })
	}()
	<-started
	r = d.Handle(ctx, "m3", nil, ok)
	close(release)
	<-finished
	assert.Equal(t, idemmsg.Retry, r.Action)
	assert.Equal(t, 250*time.Millisecond, r.Delay)
	assert.ErrorIs(t, r.Err, idem.ErrInProgress)
	assert.False(t, r.Ran)

	// A store outage: retried, the handler not run.
	s.Before = func(context.Context, storetest.Op, string) error { return errors.New("store down") }
	before := runs.Load()
	r = d.Handle(ctx, "m4", nil, ok)
	assert.Equal(t, idemmsg.Retry, r.Action)
	assert.Equal(t, before, runs.Load())
	s.Before = nil

	r = d.Handle(ctx, "", nil, ok)
	assert.Equal(t, idemmsg.Reject, r.Action)
	assert.ErrorIs(t, r.Err, idem.ErrInvalidKey)
}

func TestLockRejectsRecordedFailure(t *testing.T) {
	ctx := context.Background()
	d, _ := newDedup(t, idemmsg.WithGuard(idem.OnFailure(idem.Lock)))
	r := d.Handle(ctx, "m", nil, func(context.Context) error { return errors.New("declined") })
	assert.Equal(t, idemmsg.Reject, r.Action)
	r = d.Handle(ctx, "m", nil, func(context.Context) error { t.Fatal("ran again"); return nil })
	assert.Equal(t, idemmsg.Reject, r.Action)
	assert.ErrorIs(t, r.Err, idem.ErrPreviousFailure)
}

func TestHandleOutputReplays(t *testing.T) {
	ctx := context.Background()
	d, _ := newDedup(t)
	out, r := d.HandleOutput(ctx, "m", []byte("b"), func(context.Context) ([]byte, error) { return []byte("produced"), nil })
	require.Equal(t, idemmsg.Ack, r.Action)
	require.Equal(t, "produced", string(out))
	out, r = d.HandleOutput(ctx, "m", []byte("b"), func(context.Context) ([]byte, error) { return []byte("again"), nil })
	require.True(t, r.Replayed)
	require.Equal(t, "produced", string(out))
}

func TestOptions(t *testing.T) {
	ms, err := memstore.New()
	require.NoError(t, err)
	_, err = idemmsg.New(ms, idemmsg.WithBusyDelay(0), idemmsg.WithGuard(idem.OnDuplicate(idem.Wait)), nil)
	require.ErrorIs(t, err, idem.ErrInvalidOption)
	for _, want := range []string{"WithBusyDelay", "OnDuplicate(Wait)", "nil option"} {
		assert.Contains(t, err.Error(), want)
	}
	_, err = idemmsg.New(nil)
	require.ErrorIs(t, err, idem.ErrInvalidOption)
	var zero idemmsg.Dedup
	r := zero.Handle(context.Background(), "k", nil, func(context.Context) error { return nil })
	assert.Equal(t, idemmsg.Retry, r.Action)
	assert.ErrorIs(t, r.Err, idem.ErrInvalidOption)
}

// TestLockRetriesGivenUpHandler: under Lock, a handler that returns its
// context's error after the consumer's context ended was released, not
// recorded (the Guard stores no given-up call), so the message is retried,
// never rejected: a redelivery runs it.
func TestLockRetriesGivenUpHandler(t *testing.T) {
	d, _ := newDedup(t, idemmsg.WithGuard(idem.OnFailure(idem.Lock)))
	ctx, cancel := context.WithCancel(context.Background())
	r := d.Handle(ctx, "m", nil, func(ctx context.Context) error {
		cancel() // the consumer shuts down while the handler runs
		<-ctx.Done()
		return ctx.Err()
	})
	assert.Equal(t, idemmsg.Retry, r.Action, "a given-up handler's message must be redelivered, not dropped: %v", r.Err)
	var ran bool
	r = d.Handle(context.Background(), "m", nil, func(context.Context) error { ran = true; return nil })
	assert.True(t, ran, "the redelivery runs the handler")
	assert.Equal(t, idemmsg.Ack, r.Action)
}
