package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

// holdingHTTP is the SDK's HTTP client with completions (an UpdateItem
// that sets completed_at, DoTx's transaction excepted) held as a slow
// network holds them: the request reaches DynamoDB only after hold, while
// the caller gets no reply before its own context ends. With first set,
// only the first completion is held.
type holdingHTTP struct {
	next  *http.Client
	hold  time.Duration
	first bool

	mu      sync.Mutex
	held    int
	landed  sync.WaitGroup
	results []int // HTTP status of each held request once delivered
	// gaveUp counts held requests whose caller stopped waiting before the
	// delivery: the case the test is about.
	gaveUp atomic.Int32
}

func (h *holdingHTTP) Do(req *http.Request) (*http.Response, error) {
	if req.Header.Get("X-Amz-Target") != "DynamoDB_20120810.UpdateItem" {
		return h.next.Do(req)
	}
	body, err := io.ReadAll(req.Body)
	if err != nil {
		return nil, err
	}
	_ = req.Body.Close()
	req.Body = io.NopCloser(bytes.NewReader(body))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	if !bytes.Contains(body, []byte("#ca = :now")) {
		return h.next.Do(req)
	}
	h.mu.Lock()
	hold := !h.first || h.held == 0
	if hold {
		h.held++
		h.landed.Add(1)
	}
	h.mu.Unlock()
	if !hold {
		return h.next.Do(req)
	}
	type reply struct {
		resp *http.Response
		err  error
	}
	done := make(chan reply, 1)
	late := req.Clone(context.Background())
	late.Body = io.NopCloser(bytes.NewReader(body))
	go func() {
		defer h.landed.Done()
		time.Sleep(h.hold)
		resp, err := h.next.Do(late)
		h.mu.Lock()
		if err == nil {
			h.results = append(h.results, resp.StatusCode)
		} else {
			h.results = append(h.results, -1)
		}
		h.mu.Unlock()
		done <- reply{resp, err}
	}()
	select {
	case r := <-done:
		return r.resp, r.err
	case <-req.Context().Done():
		h.gaveUp.Add(1)
		return nil, req.Context().Err()
	}
}

// TestNotRecordedOnlyWhenTrue: a completion held by the network past the
// takeover threshold + 300 ms and then delivered never leaves a record
// completed behind an ErrNotRecorded answer.
func TestNotRecordedOnlyWhenTrue(t *testing.T) {
	const takeover = time.Second
	for _, tc := range []struct {
		name  string
		first bool
	}{{"first completion held", true}, {"every completion held", false}} {
		t.Run(tc.name, func(t *testing.T) {
			e := newEnv(t)
			h := &holdingHTTP{next: &http.Client{}, hold: takeover + 300*time.Millisecond, first: tc.first}
			client := newClient(clientConfig{endpoint: e.endpoint, httpClient: &http.Client{Transport: roundTripper{h}}})
			s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(e.prefix))
			g := newGuard[int](t, s, idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover/4))
			ctx := context.Background()
			v, err := g.Do(ctx, "k", func(context.Context) (int, error) { return 7, nil })
			h.landed.Wait()
			// The record as it ends, read through the store without the hold.
			sk, err2 := guardinfo.StorageKey(g, "k")
			if err2 != nil {
				t.Fatal(err2)
			}
			rec, gerr := e.store.Get(ctx, sk)
			completed := gerr == nil && rec.Status == storekit.StatusCompleted
			t.Logf("Do = %d, %v; held %d, caller gave up on %d, late statuses %v; record completed %v", v, err, h.held, h.gaveUp.Load(), h.results, completed)
			if errors.Is(err, storekit.ErrNotRecorded) && completed {
				t.Fatalf("Do answered %v, and the record ended completed: %+v", err, rec)
			}
			if v != 7 {
				t.Errorf("Do's value = %d, want fn's 7", v)
			}
			if err == nil && !completed {
				t.Errorf("Do succeeded but the record is %+v, %v", rec, gerr)
			}
			if completed {
				if got, err := g.Do(ctx, "k", func(context.Context) (int, error) { return 0, errors.New("ran again") }); err != nil || got != 7 {
					t.Errorf("replay = %d, %v; want 7", got, err)
				}
			}
		})
	}
}

type roundTripper struct{ h *holdingHTTP }

func (r roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return r.h.Do(req) }
