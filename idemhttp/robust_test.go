package idemhttp_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// post sends a POST with key over a real connection and returns the
// response with its body read.
func post(t *testing.T, c *http.Client, url, method, key, body string) (*http.Response, string) {
	t.Helper()
	r, err := http.NewRequest(method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		r.Header.Set("Idempotency-Key", key)
	}
	resp, err := c.Do(r)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("reading the body: %v", err)
	}
	return resp, string(b)
}

// TestStoreFailureDoesNotHoldResponse: when the store fails to record the
// outcome (or to release a claim whose response is not recorded), the
// first caller gets its whole response at once, not after the Guard's
// retries (up to the 30 s takeover threshold here, and a fence after it);
// a retry meanwhile is told the key is in progress and the handler does
// not run again.
func TestStoreFailureDoesNotHoldResponse(t *testing.T) {
	const takeover = 30 * time.Second
	for _, name := range []string{"complete fails", "release hangs"} {
		t.Run(name, func(t *testing.T) {
			store := storetest.Instrument(mustMem())
			store.Before = func(ctx context.Context, op storetest.Op, key string) error {
				switch {
				case name == "complete fails" && op == storetest.OpComplete:
					return &idem.StoreError{Op: "complete", Err: errors.New("connection reset")}
				case name == "release hangs" && op == storetest.OpRelease:
					<-ctx.Done()
					return &idem.StoreError{Op: "release", Err: ctx.Err()}
				}
				return nil
			}
			h := &counter{}
			if name == "release hangs" {
				h.status = http.StatusBadGateway // not recorded: the claim is released
			}
			m := newMW(t, store, idemhttp.WithGuard(idem.WithTakeoverAfter(takeover)))
			ts := httptest.NewServer(m.Handler(h))
			defer ts.Close()
			// The client gives up well before the store would let go, and
			// well after the middleware should have answered.
			c := &http.Client{Timeout: takeover / 3}
			start := time.Now()
			resp, body := post(t, c, ts.URL, "POST", "k", "x")
			el := time.Since(start)
			if resp.StatusCode != h.statusOr() || !strings.Contains(body, `"run":1`) {
				t.Fatalf("first caller: %d %q", resp.StatusCode, body)
			}
			if el > 5*time.Second {
				t.Fatalf("first response took %v (store failing, takeover %v)", el, takeover)
			}
			resp, body = post(t, c, ts.URL, "POST", "k", "x")
			if resp.StatusCode != http.StatusConflict || !strings.Contains(body, idemhttp.ProblemInProgress) {
				t.Fatalf("retry while the outcome is being recorded: %d %q", resp.StatusCode, body)
			}
			if h.runs.Load() != 1 {
				t.Fatalf("runs = %d", h.runs.Load())
			}
		})
	}
}

// TestRecordedInBackground: an outcome the store refuses at first is
// recorded once it accepts, after the first caller has its response: a
// retry gets a 409 meanwhile, then the replay, and the handler runs once.
func TestRecordedInBackground(t *testing.T) {
	var failing atomic.Bool
	failing.Store(true)
	store := storetest.Instrument(mustMem())
	store.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpComplete && failing.Load() {
			return &idem.StoreError{Op: "complete", Err: errors.New("connection reset")}
		}
		return nil
	}
	h := &counter{}
	ts := httptest.NewServer(newMW(t, store, idemhttp.WithGuard(idem.WithTakeoverAfter(30*time.Second))).Handler(h))
	defer ts.Close()
	c := &http.Client{Timeout: 10 * time.Second}
	first, firstBody := post(t, c, ts.URL, "POST", "k", "x")
	if first.StatusCode != http.StatusCreated {
		t.Fatalf("first: %d %q", first.StatusCode, firstBody)
	}
	if resp, body := post(t, c, ts.URL, "POST", "k", "x"); resp.StatusCode != http.StatusConflict {
		t.Fatalf("retry while the store fails: %d %q", resp.StatusCode, body)
	}
	failing.Store(false)
	// The Guard retries at least once a second; 20 s is well within the
	// 30 s it keeps trying.
	deadline := time.Now().Add(20 * time.Second)
	for {
		resp, body := post(t, c, ts.URL, "POST", "k", "x")
		if resp.StatusCode == http.StatusCreated {
			if body != firstBody || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("replay: %q %v, want %q replayed", body, resp.Header, firstBody)
			}
			break
		}
		if resp.StatusCode != http.StatusConflict || time.Now().After(deadline) {
			t.Fatalf("retry once the store accepts: %d %q", resp.StatusCode, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n := h.runs.Load(); n != 1 {
		t.Fatalf("runs = %d", n)
	}
}

func (c *counter) statusOr() int {
	if c.status == 0 {
		return http.StatusCreated
	}
	return c.status
}

// TestMethodCaseGuarded: a request whose method is a guarded one spelled
// in another case ("post") is guarded too: the handler runs once per key,
// over a real connection, whatever the spelling.
func TestMethodCaseGuarded(t *testing.T) {
	h := &counter{}
	ts := httptest.NewServer(newMW(t, nil, idemhttp.WithRequired()).Handler(h))
	defer ts.Close()
	for _, method := range []string{"post", "post", "Post", "pAtCh"} {
		resp, body := post(t, ts.Client(), ts.URL, method, "k-"+method, "x")
		if resp.StatusCode != http.StatusCreated || !strings.Contains(body, `"run":`) {
			t.Fatalf("%s: %d %q", method, resp.StatusCode, body)
		}
	}
	if n := h.runs.Load(); n != 3 {
		t.Fatalf("runs = %d, want 3 (post twice with one key, then Post and pAtCh)", n)
	}
	// A method given to WithMethods is matched in any case too.
	h2 := &counter{}
	ts2 := httptest.NewServer(newMW(t, nil, idemhttp.WithMethods("PURGE")).Handler(h2))
	defer ts2.Close()
	post(t, ts2.Client(), ts2.URL, "purge", "k", "")
	if resp, _ := post(t, ts2.Client(), ts2.URL, "purge", "k", ""); resp.Header.Get(idemhttp.ReplayedHeader) != "true" || h2.runs.Load() != 1 {
		t.Fatalf("purge under WithMethods(PURGE): %v, runs %d", resp.Header, h2.runs.Load())
	}
	// Guarded means WithRequired holds too.
	if resp, _ := post(t, ts.Client(), ts.URL, "post", "", "x"); resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("post without a key: %d, want 400", resp.StatusCode)
	}
	// The method is part of the request: "post" and "POST" with one key are
	// two requests, and the second is refused rather than run.
	if resp, _ := post(t, ts.Client(), ts.URL, "POST", "k-post", "x"); resp.StatusCode != http.StatusUnprocessableEntity {
		t.Fatalf("POST after post with the same key: %d, want 422", resp.StatusCode)
	}
	if n := h.runs.Load(); n != 3 {
		t.Fatalf("runs = %d, want 3", n)
	}
}

// TestPerResponseHeadersNotReplayed: by default the headers that name one
// response (Date, request and trace ids, Server-Timing, Set-Cookie) are
// not recorded; the replay's come from the server and the layers in front,
// as for any response.
func TestPerResponseHeadersNotReplayed(t *testing.T) {
	const oldDate = "Mon, 01 Jan 2001 00:00:00 GMT"
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", "application/json")
		hd.Set("Location", "/payments/1")
		hd.Set("Date", oldDate)
		hd.Set("X-Request-Id", "req-first")
		hd.Set("Traceparent", "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01")
		hd.Set("Server-Timing", "db;dur=53")
		hd.Set("Set-Cookie", "session=1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, `{"id":1}`)
	})
	ts := httptest.NewServer(newMW(t, nil).Handler(h))
	defer ts.Close()
	first, _ := post(t, ts.Client(), ts.URL, "POST", "k", "x")
	if first.Header.Get("X-Request-Id") != "req-first" || first.Header.Get("Date") != oldDate {
		t.Fatalf("first response: %v", first.Header)
	}
	resp, body := post(t, ts.Client(), ts.URL, "POST", "k", "x")
	if resp.StatusCode != http.StatusCreated || body != `{"id":1}` || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	for _, k := range []string{"X-Request-Id", "Traceparent", "Server-Timing", "Set-Cookie"} {
		if v := resp.Header.Values(k); len(v) > 0 {
			t.Errorf("replayed %s: %q", k, v)
		}
	}
	if d := resp.Header.Get("Date"); d == oldDate || d == "" {
		t.Errorf("replay Date = %q, want the server's own", d)
	}
	if resp.Header.Get("Location") != "/payments/1" || resp.Header.Get("Content-Type") != "application/json" {
		t.Errorf("replay lost the response's own headers: %v", resp.Header)
	}
}

// TestRetryAfterFromPolicies: a 409 in progress says when a retry can
// expect an answer: within one heartbeat interval of the owner, or when
// the claim would go stale if sooner (the record's heartbeat age counts),
// in whole seconds, at least 1.
func TestRetryAfterFromPolicies(t *testing.T) {
	for _, c := range []struct {
		name      string
		heartbeat time.Duration
		takeover  time.Duration
		skew      time.Duration // how far the store's clock is behind: the heartbeat looks that old
		want      string
	}{
		{"one heartbeat", 7 * time.Second, 30 * time.Second, 0, "7"},
		{"rounded up", 2500 * time.Millisecond, 30 * time.Second, 0, "3"},
		{"at least 1", 200 * time.Millisecond, 30 * time.Second, 0, "1"},
		// 4 s left, less the time the test takes: "4", or "3" on a machine
		// slow enough to take a second between the claim and the 409.
		{"stale sooner", 7 * time.Second, 30 * time.Second, 26 * time.Second, "4|3"},
	} {
		t.Run(c.name, func(t *testing.T) {
			store := mustMem(memstore.WithClock(func() time.Time { return time.Now().Add(-c.skew) }))
			h := &counter{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			srv := newMW(t, store, idemhttp.WithGuard(idem.WithHeartbeat(c.heartbeat), idem.WithTakeoverAfter(c.takeover))).Handler(h)
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- do(srv, req{key: "k", body: "x"}) }()
			<-h.entered
			w := do(srv, req{key: "k", body: "x"})
			close(h.block)
			<-done
			if w.Code != http.StatusConflict || problemOf(t, w).Type != idemhttp.ProblemInProgress {
				t.Fatalf("got %d %s, want 409 in progress", w.Code, w.Body)
			}
			if got := w.Header().Get("Retry-After"); !slices.Contains(strings.Split(c.want, "|"), got) {
				t.Fatalf("Retry-After = %q, want %q", got, c.want)
			}
		})
	}
}

// damaging is a store whose completions are stored damaged by damage.
type damaging struct {
	storekit.Store
	damage func([]byte) []byte
}

func (s damaging) Complete(ctx context.Context, key, nonce string, c storekit.Completion) error {
	if c.Result != nil {
		c.Result = s.damage(append([]byte(nil), c.Result...))
	}
	return s.Store.Complete(ctx, key, nonce, c)
}

// TestDamagedRecordRefused: a recorded response with bytes added or lost
// is never replayed as another response: the replay is a 500 problem.
func TestDamagedRecordRefused(t *testing.T) {
	for name, damage := range map[string]func([]byte) []byte{
		"byte appended":  func(b []byte) []byte { return append(b, '!') },
		"truncated":      func(b []byte) []byte { return b[:len(b)-1] },
		"cut in half":    func(b []byte) []byte { return b[:len(b)/2] },
		"body byte flip": func(b []byte) []byte { i := strings.Index(string(b), `"id"`); b[i+1] ^= 0x20; return b },
	} {
		t.Run(name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusCreated)
				io.WriteString(w, `{"id":1,"amount":100}`)
			})
			srv := newMW(t, damaging{Store: mustMem(), damage: damage}).Handler(h)
			if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated {
				t.Fatalf("first: %d", w.Code)
			}
			w := do(srv, req{key: "k"})
			if w.Code != http.StatusInternalServerError || problemOf(t, w).Type != idemhttp.ProblemInternal || !strings.Contains(w.Body.String(), "damaged") {
				t.Fatalf("replay of a damaged record: %d %q", w.Code, w.Body)
			}
		})
	}
}

// TestWithSkip: a request the skip function picks passes through
// untouched (no key needed though required, no record, the handler runs
// each time); the others are guarded.
func TestWithSkip(t *testing.T) {
	h := &counter{}
	var asked atomic.Int32
	srv := newMW(t, nil, idemhttp.WithRequired(), idemhttp.WithSkip(func(r *http.Request) bool {
		asked.Add(1)
		return r.URL.Path == "/health"
	})).Handler(h)
	for i := 0; i < 2; i++ {
		if w := do(srv, req{target: "/health", key: "k"}); w.Code != http.StatusCreated || w.Header().Get(idemhttp.ReplayedHeader) != "" {
			t.Fatalf("skipped request %d: %d %v", i, w.Code, w.Header())
		}
		if w := do(srv, req{target: "/health"}); w.Code != http.StatusCreated {
			t.Fatalf("skipped request without a key: %d %s", w.Code, w.Body)
		}
	}
	if n := h.runs.Load(); n != 4 {
		t.Fatalf("skipped: runs = %d, want 4", n)
	}
	if w := do(srv, req{}); w.Code != http.StatusBadRequest {
		t.Fatalf("not skipped, no key: %d, want 400", w.Code)
	}
	do(srv, req{key: "k"})
	if w := do(srv, req{key: "k"}); w.Header().Get(idemhttp.ReplayedHeader) != "true" || h.runs.Load() != 5 {
		t.Fatalf("not skipped: %d %v, runs %d", w.Code, w.Header(), h.runs.Load())
	}
	// Asked first, whatever the method.
	do(srv, req{method: "GET", target: "/health"})
	if n := asked.Load(); n != 8 {
		t.Fatalf("skip asked %d times, want 8", n)
	}
}

// TestWithReplayHeaders: the function decides which of the handler's
// headers are recorded; Set-Cookie is not its to allow.
func TestWithReplayHeaders(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hd := w.Header()
		hd.Set("Content-Type", "text/plain")
		hd.Set("X-Served-By", "node-1")
		hd.Set("X-Request-Id", "req-first")
		hd.Set("Set-Cookie", "session=1")
		hd["Date"] = nil // removed: recorded as removed whatever the function says
		w.WriteHeader(http.StatusCreated)
	})
	for _, c := range []struct {
		name    string
		opts    []idemhttp.Option
		present []string
		absent  []string
	}{
		{"default", nil, []string{"Content-Type", "X-Served-By"}, []string{"X-Request-Id", "Set-Cookie", "Date"}},
		{"drop one more", []idemhttp.Option{idemhttp.WithReplayHeaders(func(name string) bool {
			return name != "X-Served-By" && idemhttp.DefaultReplayHeaders(name)
		})}, []string{"Content-Type"}, []string{"X-Served-By", "X-Request-Id", "Set-Cookie", "Date"}},
		{"keep all", []idemhttp.Option{idemhttp.WithReplayHeaders(func(string) bool { return true })},
			[]string{"Content-Type", "X-Served-By", "X-Request-Id"}, []string{"Set-Cookie", "Date"}},
		{"keep all and cookies", []idemhttp.Option{idemhttp.WithReplayHeaders(func(string) bool { return true }), idemhttp.WithReplaySetCookie()},
			[]string{"Content-Type", "X-Served-By", "X-Request-Id", "Set-Cookie"}, []string{"Date"}},
		{"keep none", []idemhttp.Option{idemhttp.WithReplayHeaders(func(string) bool { return false })},
			nil, []string{"Content-Type", "X-Served-By", "X-Request-Id", "Set-Cookie", "Date"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			ts := httptest.NewServer(newMW(t, nil, c.opts...).Handler(h))
			defer ts.Close()
			post(t, ts.Client(), ts.URL, "POST", "k", "")
			resp, _ := post(t, ts.Client(), ts.URL, "POST", "k", "")
			if resp.StatusCode != http.StatusCreated || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("replay: %d %v", resp.StatusCode, resp.Header)
			}
			for _, k := range c.present {
				if resp.Header.Get(k) == "" {
					t.Errorf("%s not replayed: %v", k, resp.Header)
				}
			}
			for _, k := range c.absent {
				if _, ok := resp.Header[k]; ok && !(k == "Content-Type" && resp.Header.Get(k) != "text/plain") {
					t.Errorf("%s replayed: %v", k, resp.Header)
				}
			}
		})
	}
}

func TestDefaultReplayHeaders(t *testing.T) {
	for name, want := range map[string]bool{
		"Date": false, "date": false, "X-Request-Id": false, "x-request-id": false, "Traceparent": false,
		"Content-Type": true, "Location": true, "Etag": true, "Retry-After": true, "X-Custom": true,
	} {
		if got := idemhttp.DefaultReplayHeaders(name); got != want {
			t.Errorf("DefaultReplayHeaders(%q) = %v, want %v", name, got, want)
		}
	}
}
