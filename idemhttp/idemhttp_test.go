package idemhttp_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

// counter is a handler that counts its runs and answers with what it saw.
type counter struct {
	runs    atomic.Int32
	block   chan struct{} // if set, each run waits for it to close
	entered chan struct{} // if set, gets a value when a run starts
	status  int
}

func (c *counter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n := c.runs.Add(1)
	if c.entered != nil {
		c.entered <- struct{}{}
	}
	if c.block != nil {
		<-c.block
	}
	body, _ := io.ReadAll(r.Body)
	tok, _ := idem.FencingToken(r.Context())
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("X-Run", fmt.Sprint(n))
	status := c.status
	if status == 0 {
		status = http.StatusCreated
	}
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"run":%d,"token":%d,"body":%q}`, n, tok, body)
}

func newMW(t testing.TB, store storekit.Store, opts ...idemhttp.Option) *idemhttp.Middleware {
	t.Helper()
	if store == nil {
		store = mustMem()
	}
	m, err := idemhttp.New(store, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

type req struct {
	method, target, key, body string
	header                    http.Header
	ctx                       context.Context
}

func do(h http.Handler, rq req) *httptest.ResponseRecorder {
	if rq.method == "" {
		rq.method = http.MethodPost
	}
	if rq.target == "" {
		rq.target = "/payments"
	}
	r := httptest.NewRequest(rq.method, rq.target, strings.NewReader(rq.body))
	if rq.ctx != nil {
		r = r.WithContext(rq.ctx)
	}
	if rq.key != "" {
		r.Header.Set("Idempotency-Key", rq.key)
	}
	for k, v := range rq.header {
		r.Header[k] = v
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

type problemDoc struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail"`
	OriginalStatus int    `json:"original_status"`
}

func problemOf(t *testing.T, w *httptest.ResponseRecorder) problemDoc {
	t.Helper()
	if ct := w.Header().Get("Content-Type"); ct != "application/problem+json" {
		t.Fatalf("Content-Type = %q, want application/problem+json (status %d, body %s)", ct, w.Code, w.Body)
	}
	var p problemDoc
	if err := json.Unmarshal(w.Body.Bytes(), &p); err != nil {
		t.Fatalf("problem body %q: %v", w.Body, err)
	}
	if p.Status != w.Code {
		t.Fatalf("problem status %d, response status %d", p.Status, w.Code)
	}
	if p.Title == "" || p.Type == "" {
		t.Fatalf("problem without type or title: %+v", p)
	}
	return p
}

// TestErrorRows covers every error of the draft's list (missing key, key
// reused with another request, concurrent request) and the middleware's
// own (invalid key, body too large, unknown principal, store failure): the
// status, the problem type, and that the handler did not run.
func TestErrorRows(t *testing.T) {
	failing := storetest.Instrument(mustMem())
	failing.Before = func(ctx context.Context, op storetest.Op, key string) error {
		return errors.New("store is down")
	}
	tests := []struct {
		name    string
		store   storekit.Store
		opts    []idemhttp.Option
		first   *req // sent before, must succeed
		req     req
		status  int
		problem string
		runs    int32 // handler runs in total
	}{
		{name: "missing key, required", opts: []idemhttp.Option{idemhttp.WithRequired()},
			req: req{}, status: 400, problem: idemhttp.ProblemKeyMissing},
		{name: "malformed key: unterminated string", req: req{key: `"abc`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "malformed key: bad escape", req: req{key: `"a\b"`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "malformed key: parameters", req: req{key: `"abc";a=1`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "malformed key: bare with comma", req: req{key: `a,b`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "malformed key: empty string", req: req{key: `""`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "key too long", req: req{key: strings.Repeat("k", idemhttp.MaxKeyLen+1)}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "key too long, quoted", req: req{key: `"` + strings.Repeat("k", idemhttp.MaxKeyLen+1) + `"`}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "two key field lines", req: req{header: http.Header{"Idempotency-Key": {"a", "b"}}}, status: 400, problem: idemhttp.ProblemKeyInvalid},
		{name: "key reused with another body", first: &req{key: "k1", body: "amount=1"},
			req: req{key: "k1", body: "amount=2"}, status: 422, problem: idemhttp.ProblemKeyReused, runs: 1},
		{name: "key reused with another path", first: &req{key: "k1", body: "a"},
			req: req{key: "k1", body: "a", target: "/refunds"}, status: 422, problem: idemhttp.ProblemKeyReused, runs: 1},
		{name: "key reused with another query", first: &req{key: "k1", target: "/p?x=1"},
			req: req{key: "k1", target: "/p?x=2"}, status: 422, problem: idemhttp.ProblemKeyReused, runs: 1},
		{name: "key reused with another method", opts: []idemhttp.Option{idemhttp.WithMethods("POST", "PUT")}, first: &req{key: "k1"},
			req: req{key: "k1", method: "PUT"}, status: 422, problem: idemhttp.ProblemKeyReused, runs: 1},
		{name: "key reused with another fingerprinted header", opts: []idemhttp.Option{idemhttp.WithFingerprintHeaders("x-account")},
			first: &req{key: "k1", header: http.Header{"X-Account": {"a"}}},
			req:   req{key: "k1", header: http.Header{"X-Account": {"b"}}}, status: 422, problem: idemhttp.ProblemKeyReused, runs: 1},
		{name: "body over the limit", opts: []idemhttp.Option{idemhttp.WithMaxBody(4)},
			req: req{key: "k1", body: "12345"}, status: 413, problem: idemhttp.ProblemBodyTooLarge},
		{name: "principal refused", opts: []idemhttp.Option{idemhttp.WithPrincipal(func(*http.Request) (string, error) { return "", errors.New("no api key") })},
			req: req{key: "k1"}, status: 401, problem: idemhttp.ProblemUnauthorized},
		{name: "principal empty", opts: []idemhttp.Option{idemhttp.WithPrincipal(func(*http.Request) (string, error) { return "", nil })},
			req: req{key: "k1"}, status: 401, problem: idemhttp.ProblemUnauthorized},
		{name: "store failure", store: failing, req: req{key: "k1"}, status: 503, problem: idemhttp.ProblemStoreUnavailable},
		{name: "duplicate under Raise", opts: []idemhttp.Option{idemhttp.WithGuard(idem.OnDuplicate(idem.Raise))}, first: &req{key: "k1"},
			req: req{key: "k1"}, status: 409, problem: idemhttp.ProblemAlreadyProcessed, runs: 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := &counter{}
			m := newMW(t, tt.store, tt.opts...)
			srv := m.Handler(h)
			if tt.first != nil {
				if w := do(srv, *tt.first); w.Code != http.StatusCreated {
					t.Fatalf("first request: %d %s", w.Code, w.Body)
				}
			}
			w := do(srv, tt.req)
			if w.Code != tt.status {
				t.Fatalf("status %d, want %d: %s", w.Code, tt.status, w.Body)
			}
			if p := problemOf(t, w); p.Type != tt.problem {
				t.Fatalf("problem type %q, want %q", p.Type, tt.problem)
			}
			if got := h.runs.Load(); got != tt.runs {
				t.Fatalf("handler ran %d times, want %d", got, tt.runs)
			}
		})
	}
}

// TestInProgress: a second request while the first runs gets a 409 with
// Retry-After (the draft's concurrent-request row), and the handler runs once.
func TestInProgress(t *testing.T) {
	for _, name := range []string{"same process", "other process"} {
		t.Run(name, func(t *testing.T) {
			store := mustMem()
			h := &counter{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			first := newMW(t, store).Handler(h)
			second := first
			if name == "other process" { // a second Middleware shares only the store
				second = newMW(t, store).Handler(h)
			}
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- do(first, req{key: "k", body: "x"}) }()
			<-h.entered
			w := do(second, req{key: "k", body: "x"})
			if w.Code != http.StatusConflict || problemOf(t, w).Type != idemhttp.ProblemInProgress {
				t.Fatalf("got %d %s, want 409 in progress", w.Code, w.Body)
			}
			// The default heartbeat interval, 5 s (see TestRetryAfterFromPolicies).
			if w.Header().Get("Retry-After") != "5" {
				t.Fatalf("Retry-After = %q", w.Header().Get("Retry-After"))
			}
			// Another body is refused as a mismatch even while in progress.
			if w := do(second, req{key: "k", body: "y"}); w.Code != http.StatusUnprocessableEntity {
				t.Fatalf("mismatch while in progress: %d %s", w.Code, w.Body)
			}
			close(h.block)
			if w := <-done; w.Code != http.StatusCreated {
				t.Fatalf("first: %d", w.Code)
			}
			if w := do(second, req{key: "k", body: "x"}); w.Code != http.StatusCreated || w.Header().Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("after completion: %d %v", w.Code, w.Header())
			}
			if h.runs.Load() != 1 {
				t.Fatalf("runs = %d", h.runs.Load())
			}
		})
	}
}

// TestWait: under idem.OnDuplicate(idem.Wait) the duplicate waits for the
// first response and gets it replayed; a wait is bounded by the request's
// context (then 409).
func TestWait(t *testing.T) {
	for _, name := range []string{"same process", "other process"} {
		t.Run(name, func(t *testing.T) {
			store := mustMem()
			h := &counter{block: make(chan struct{}), entered: make(chan struct{}, 1)}
			opt := idemhttp.WithGuard(idem.OnDuplicate(idem.Wait))
			first := newMW(t, store, opt).Handler(h)
			second := first
			if name == "other process" {
				second = newMW(t, store, opt).Handler(h)
			}
			done := make(chan *httptest.ResponseRecorder)
			go func() { done <- do(first, req{key: "k", body: "x"}) }()
			<-h.entered

			ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
			w := do(second, req{key: "k", body: "x", ctx: ctx})
			cancel()
			if w.Code != http.StatusConflict || problemOf(t, w).Type != idemhttp.ProblemInProgress {
				t.Fatalf("bounded wait: %d %s, want 409", w.Code, w.Body)
			}

			waited := make(chan *httptest.ResponseRecorder)
			go func() { waited <- do(second, req{key: "k", body: "x"}) }()
			time.Sleep(20 * time.Millisecond) // let it start waiting (not needed for correctness)
			close(h.block)
			w1, w2 := <-done, <-waited
			if w1.Code != http.StatusCreated || w2.Code != http.StatusCreated {
				t.Fatalf("codes %d %d", w1.Code, w2.Code)
			}
			if w1.Body.String() != w2.Body.String() || w2.Header().Get(idemhttp.ReplayedHeader) != "true" {
				t.Fatalf("waiter got %q (%v), first %q", w2.Body, w2.Header(), w1.Body)
			}
			if h.runs.Load() != 1 {
				t.Fatalf("runs = %d", h.runs.Load())
			}
		})
	}
}

// TestReplayByteForByte: status, headers and body come back exactly, with
// Idempotent-Replayed; hop-by-hop headers and Set-Cookie are not replayed.
func TestReplayByteForByte(t *testing.T) {
	body := []byte{0, 1, 2, 0xff, 0xfe, '\n', 'x'}
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Add("X-Multi", "a")
		w.Header().Add("X-Multi", "b")
		w.Header().Set("Set-Cookie", "session=1")
		w.Header().Set("Connection", "X-Conn-Only")
		w.Header().Set("X-Conn-Only", "1")
		w.Header().Set("Keep-Alive", "timeout=5")
		w.WriteHeader(http.StatusAccepted)
		w.Write(body[:3])
		w.Write(body[3:])
		w.Header().Set("X-After", "not sent") // after the status line: not part of the response
	})
	for _, cookies := range []bool{false, true} {
		t.Run(fmt.Sprintf("cookies=%v", cookies), func(t *testing.T) {
			var opts []idemhttp.Option
			if cookies {
				opts = append(opts, idemhttp.WithReplaySetCookie())
			}
			srv := newMW(t, nil, opts...).Handler(h)
			first := do(srv, req{key: `"abc"`, body: "x"})
			if first.Header().Get(idemhttp.ReplayedHeader) != "" {
				t.Fatal("first response marked as replayed")
			}
			// The same key, bare, is the same key.
			w := do(srv, req{key: `abc`, body: "x"})
			if w.Code != http.StatusAccepted || !bytes.Equal(w.Body.Bytes(), body) {
				t.Fatalf("replay %d %q", w.Code, w.Body.Bytes())
			}
			hd := w.Header()
			if hd.Get(idemhttp.ReplayedHeader) != "true" || hd.Get("Content-Type") != "application/octet-stream" ||
				strings.Join(hd.Values("X-Multi"), ",") != "a,b" {
				t.Fatalf("replay headers %v", hd)
			}
			for _, gone := range []string{"Connection", "X-Conn-Only", "Keep-Alive", "X-After"} {
				if hd.Get(gone) != "" {
					t.Fatalf("replayed %s: %v", gone, hd)
				}
			}
			if got := hd.Get("Set-Cookie") != ""; got != cookies {
				t.Fatalf("Set-Cookie replayed = %v, want %v", got, cookies)
			}
		})
	}
}

// TestServerErrorsNotRecorded: a 5xx releases the claim so the retry runs
// again; WithRecordStatus changes which statuses are recorded.
func TestServerErrorsNotRecorded(t *testing.T) {
	h := &counter{status: http.StatusBadGateway}
	srv := newMW(t, nil).Handler(h)
	for i := 1; i <= 2; i++ {
		if w := do(srv, req{key: "k"}); w.Code != http.StatusBadGateway || w.Header().Get(idemhttp.ReplayedHeader) != "" {
			t.Fatalf("try %d: %d %v", i, w.Code, w.Header())
		}
	}
	if h.runs.Load() != 2 {
		t.Fatalf("5xx: runs = %d, want 2", h.runs.Load())
	}

	h = &counter{status: http.StatusBadGateway}
	srv = newMW(t, nil, idemhttp.WithRecordStatus(func(int) bool { return true })).Handler(h)
	do(srv, req{key: "k"})
	if w := do(srv, req{key: "k"}); w.Code != http.StatusBadGateway || w.Header().Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("recorded 5xx: %d %v", w.Code, w.Header())
	}
	if h.runs.Load() != 1 {
		t.Fatalf("recorded 5xx: runs = %d, want 1", h.runs.Load())
	}

	// And a 4xx the option refuses is not recorded.
	h = &counter{status: http.StatusConflict}
	srv = newMW(t, nil, idemhttp.WithRecordStatus(func(s int) bool { return s < 300 })).Handler(h)
	do(srv, req{key: "k"})
	do(srv, req{key: "k"})
	if h.runs.Load() != 2 {
		t.Fatalf("refused 409: runs = %d, want 2", h.runs.Load())
	}
}

// TestResponseOverRecordLimit: the first caller gets the whole body, replays
// get a problem document (never a truncated body).
func TestResponseOverRecordLimit(t *testing.T) {
	big := strings.Repeat("0123456789", 100)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, big)
	})
	srv := newMW(t, nil, idemhttp.WithMaxRecordedBody(999)).Handler(h)
	if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated || w.Body.String() != big {
		t.Fatalf("first: %d, %d bytes", w.Code, w.Body.Len())
	}
	w := do(srv, req{key: "k"})
	p := problemOf(t, w)
	if w.Code != http.StatusConflict || p.Type != idemhttp.ProblemResponseNotRecorded || p.OriginalStatus != http.StatusCreated {
		t.Fatalf("replay: %d %+v", w.Code, p)
	}
	if w.Header().Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatal("no Idempotent-Replayed on the problem")
	}
	// Exactly at the limit is recorded.
	srv = newMW(t, nil, idemhttp.WithMaxRecordedBody(1000)).Handler(h)
	do(srv, req{key: "k"})
	if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated || w.Body.String() != big {
		t.Fatalf("at the limit: %d, %d bytes", w.Code, w.Body.Len())
	}
}

// TestHeadersCountTowardsRecordLimit: the record limit bounds headers and
// body together, so a response with large headers is not recorded whole
// (a record the store refuses would leave the key claimed), and an omitted
// response keeps neither its headers nor its body.
func TestHeadersCountTowardsRecordLimit(t *testing.T) {
	bigHeader := strings.Repeat("h", 600)
	for _, tc := range []struct {
		name     string
		body     string
		write    bool
		recorded bool
	}{
		{name: "headers and body over", body: strings.Repeat("b", 500), write: true},
		{name: "headers and body under", body: strings.Repeat("b", 300), write: true, recorded: true},
		{name: "headers alone over, nothing written", body: "", write: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("X-Big", bigHeader)
				if tc.write {
					w.WriteHeader(http.StatusCreated)
					io.WriteString(w, tc.body)
				}
			})
			limit := int64(1000)
			if !tc.write {
				limit = 500
			}
			srv := newMW(t, nil, idemhttp.WithMaxRecordedBody(limit)).Handler(h)
			first := do(srv, req{key: "k"})
			if first.Body.String() != tc.body || first.Header().Get("X-Big") != bigHeader {
				t.Fatalf("first caller: %d, %d bytes", first.Code, first.Body.Len())
			}
			w := do(srv, req{key: "k"})
			if tc.recorded {
				if w.Code != first.Code || w.Body.String() != tc.body || w.Header().Get("X-Big") != bigHeader {
					t.Fatalf("replay: %d %v", w.Code, w.Header())
				}
				return
			}
			p := problemOf(t, w)
			if w.Code != http.StatusConflict || p.Type != idemhttp.ProblemResponseNotRecorded || p.OriginalStatus != first.Code {
				t.Fatalf("replay: %d %+v", w.Code, p)
			}
			if w.Header().Get("X-Big") != "" {
				t.Fatal("the replay of an omitted response carries its headers")
			}
		})
	}
}

// TestRetryLaterStatusesNotRecorded: by default 408, 425 and 429 (which ask
// the client to send the same request again) are not recorded, so the
// retry runs the handler; other 4xx are.
func TestRetryLaterStatusesNotRecorded(t *testing.T) {
	for _, status := range []int{http.StatusRequestTimeout, http.StatusTooEarly, http.StatusTooManyRequests, http.StatusInternalServerError} {
		h := &counter{status: status}
		srv := newMW(t, nil).Handler(h)
		do(srv, req{key: "k"})
		if w := do(srv, req{key: "k"}); w.Code != status || w.Header().Get(idemhttp.ReplayedHeader) != "" || h.runs.Load() != 2 {
			t.Fatalf("%d: replayed=%q, runs %d; want not recorded", status, w.Header().Get(idemhttp.ReplayedHeader), h.runs.Load())
		}
	}
	for _, status := range []int{http.StatusBadRequest, http.StatusNotFound, http.StatusConflict, http.StatusUnprocessableEntity} {
		h := &counter{status: status}
		srv := newMW(t, nil).Handler(h)
		do(srv, req{key: "k"})
		if w := do(srv, req{key: "k"}); w.Code != status || w.Header().Get(idemhttp.ReplayedHeader) != "true" || h.runs.Load() != 1 {
			t.Fatalf("%d: replayed=%q, runs %d; want recorded", status, w.Header().Get(idemhttp.ReplayedHeader), h.runs.Load())
		}
	}
	if idemhttp.DefaultRecordStatus(http.StatusTooManyRequests) || !idemhttp.DefaultRecordStatus(http.StatusCreated) {
		t.Fatal("DefaultRecordStatus")
	}
}

// TestPrincipalScoping: one client can never replay another's response.
func TestPrincipalScoping(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil, idemhttp.WithPrincipal(func(r *http.Request) (string, error) {
		if k := r.Header.Get("X-Api-Key"); k != "" {
			return k, nil
		}
		return "", errors.New("no key")
	})).Handler(h)
	alice := http.Header{"X-Api-Key": {"alice"}}
	bob := http.Header{"X-Api-Key": {"bob"}}
	wa := do(srv, req{key: "same", body: "x", header: alice})
	wb := do(srv, req{key: "same", body: "x", header: bob})
	if wb.Header().Get(idemhttp.ReplayedHeader) != "" || wa.Body.String() == wb.Body.String() {
		t.Fatalf("bob got alice's response: %s", wb.Body)
	}
	// Bob may even use alice's key with another body.
	if w := do(srv, req{key: "same", body: "y", header: http.Header{"X-Api-Key": {"carol"}}}); w.Code != http.StatusCreated {
		t.Fatalf("carol: %d", w.Code)
	}
	if w := do(srv, req{key: "same", body: "x", header: alice}); w.Body.String() != wa.Body.String() {
		t.Fatalf("alice's replay %s, want %s", w.Body, wa.Body)
	}
	if h.runs.Load() != 3 {
		t.Fatalf("runs = %d, want 3", h.runs.Load())
	}
}

// TestPrincipalRefusedKeepsChallenge: the 401 of a refused principal keeps
// a WWW-Authenticate challenge set in front of the middleware.
func TestPrincipalRefusedKeepsChallenge(t *testing.T) {
	h := &counter{}
	inner := newMW(t, nil, idemhttp.WithPrincipal(func(*http.Request) (string, error) { return "", errors.New("no api key") })).Handler(h)
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("WWW-Authenticate", `Bearer realm="payments"`)
		inner.ServeHTTP(w, r)
	})
	w := do(srv, req{key: "k"})
	if w.Code != http.StatusUnauthorized || problemOf(t, w).Type != idemhttp.ProblemUnauthorized ||
		w.Header().Get("WWW-Authenticate") != `Bearer realm="payments"` || h.runs.Load() != 0 {
		t.Fatalf("%d %v, runs %d", w.Code, w.Header(), h.runs.Load())
	}
}

// TestMethods: only the guarded methods are guarded; others pass through
// untouched even with a key.
func TestMethods(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil, idemhttp.WithRequired()).Handler(h)
	for _, m := range []string{"GET", "PUT", "DELETE", "HEAD"} {
		do(srv, req{method: m, key: "k"})
		do(srv, req{method: m}) // no key, though required: not guarded
	}
	if h.runs.Load() != 8 {
		t.Fatalf("unguarded methods: runs = %d, want 8", h.runs.Load())
	}
	for _, m := range []string{"POST", "PATCH"} {
		do(srv, req{method: m, key: "k-" + m})
		if w := do(srv, req{method: m, key: "k-" + m}); w.Header().Get(idemhttp.ReplayedHeader) != "true" {
			t.Fatalf("%s not guarded", m)
		}
	}
	h = &counter{}
	srv = newMW(t, nil, idemhttp.WithMethods("PUT")).Handler(h)
	do(srv, req{method: "POST", key: "k"})
	do(srv, req{method: "POST", key: "k"})
	do(srv, req{method: "PUT", key: "k"})
	do(srv, req{method: "PUT", key: "k"})
	if h.runs.Load() != 3 {
		t.Fatalf("WithMethods(PUT): runs = %d, want 3", h.runs.Load())
	}
}

// TestNoKeyPassesThrough: without WithRequired a request without a key is
// not guarded.
func TestNoKeyPassesThrough(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil).Handler(h)
	do(srv, req{body: "x"})
	if w := do(srv, req{body: "x"}); w.Header().Get(idemhttp.ReplayedHeader) != "" || h.runs.Load() != 2 {
		t.Fatalf("runs %d, headers %v", h.runs.Load(), w.Header())
	}
}

// TestHeaderName: WithHeaderName reads the key from another header.
func TestHeaderName(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil, idemhttp.WithHeaderName("x-request-key"), idemhttp.WithRequired()).Handler(h)
	if w := do(srv, req{key: "k"}); w.Code != http.StatusBadRequest {
		t.Fatalf("Idempotency-Key used despite WithHeaderName: %d", w.Code)
	}
	hd := http.Header{"X-Request-Key": {"k"}}
	do(srv, req{header: hd})
	if w := do(srv, req{header: hd}); w.Header().Get(idemhttp.ReplayedHeader) != "true" || h.runs.Load() != 1 {
		t.Fatalf("runs %d", h.runs.Load())
	}
}

// TestBodyHandedOn: the handler reads the body unchanged, and bodies at the
// limit are accepted.
func TestBodyHandedOn(t *testing.T) {
	var got []byte
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = io.ReadAll(r.Body) })
	srv := newMW(t, nil, idemhttp.WithMaxBody(5)).Handler(h)
	if w := do(srv, req{key: "k", body: "12345"}); w.Code != 200 || string(got) != "12345" {
		t.Fatalf("%d %q", w.Code, got)
	}
	// Every byte value, over a real connection: the handler reads exactly
	// what was sent, with the Content-Length and GetBody it expects.
	bin := make([]byte, 256*3)
	for i := range bin {
		bin[i] = byte(i)
	}
	var gotLen int64
	var again []byte
	ts := httptest.NewServer(newMW(t, nil).Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, _ = io.ReadAll(r.Body)
		gotLen = r.ContentLength
		if rc, err := r.GetBody(); err == nil {
			again, _ = io.ReadAll(rc)
		}
	})))
	defer ts.Close()
	rq, _ := http.NewRequest("POST", ts.URL, bytes.NewReader(bin))
	rq.Header.Set("Idempotency-Key", "bin")
	resp, err := http.DefaultClient.Do(rq)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if !bytes.Equal(got, bin) || !bytes.Equal(again, bin) || gotLen != int64(len(bin)) {
		t.Fatalf("handler got %d bytes (equal %v), GetBody %d bytes, ContentLength %d", len(got), bytes.Equal(got, bin), len(again), gotLen)
	}
	// A body without Content-Length over the limit is refused too.
	r := httptest.NewRequest("POST", "/", io.MultiReader(strings.NewReader("123"), strings.NewReader("456")))
	r.ContentLength = -1
	r.Header.Set("Idempotency-Key", "k2")
	w := httptest.NewRecorder()
	srv.ServeHTTP(w, r)
	if w.Code != http.StatusRequestEntityTooLarge {
		t.Fatalf("chunked over limit: %d", w.Code)
	}
}

// TestOuterHeadersNotRecorded: headers set in front of the middleware (a
// request id) are not the handler's: a replay carries those its own layers
// set, and what the handler set, changed or deleted.
func TestOuterHeadersNotRecorded(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "private")
		w.Header().Del("X-Outer-Deleted")
		w.Header().Set("X-Handler", "1")
		w.WriteHeader(http.StatusCreated)
	})
	inner := newMW(t, nil).Handler(h)
	var n atomic.Int32
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("X-Request-Id", fmt.Sprint("req-", n.Add(1)))
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("X-Outer-Deleted", "1")
		w.Header().Set("X-Outer-Kept", "1")
		inner.ServeHTTP(w, r)
	})
	first := do(srv, req{key: "k"})
	w := do(srv, req{key: "k"})
	if w.Code != http.StatusCreated || w.Header().Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %v", w.Code, w.Header())
	}
	want := map[string]string{"X-Request-Id": "req-2", "Cache-Control": "private", "X-Handler": "1", "X-Outer-Kept": "1",
		"X-Outer-Deleted": "", idemhttp.ReplayedHeader: "true"}
	for k, v := range want {
		if got := strings.Join(w.Header().Values(k), ","); got != v {
			t.Errorf("replay %s = %q, want %q (first %v, replay %v)", k, got, v, first.Header(), w.Header())
		}
	}
}

// TestSuppressedDate: a handler that keeps net/http from sending Date
// (h["Date"] = nil) does so on the replay too.
func TestSuppressedDate(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header()["Date"] = nil
		w.WriteHeader(http.StatusCreated)
	})
	ts := httptest.NewServer(newMW(t, nil).Handler(h))
	defer ts.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", ts.URL, nil)
		r.Header.Set("Idempotency-Key", "k")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if _, ok := resp.Header["Date"]; ok || (i == 1) != (resp.Header.Get(idemhttp.ReplayedHeader) == "true") {
			t.Fatalf("response %d: %v", i, resp.Header)
		}
	}
}

// TestMaxBodyUnbounded: WithMaxBody(math.MaxInt64) hands the body on whole
// (the limit plus the one byte read to detect an overflow must not wrap).
func TestMaxBodyUnbounded(t *testing.T) {
	var got []byte
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { got, _ = io.ReadAll(r.Body) })
	srv := newMW(t, nil, idemhttp.WithMaxBody(math.MaxInt64)).Handler(h)
	if w := do(srv, req{key: "k", body: "12345"}); w.Code != http.StatusOK || string(got) != "12345" {
		t.Fatalf("%d, handler got %q", w.Code, got)
	}
}

// TestTrailersNotRecordedAsHeaders: a value set under a name declared in
// Trailer is sent after the body, so it is not replayed as a header.
func TestTrailersNotRecordedAsHeaders(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Trailer", "X-Checksum")
		w.Header().Set("X-Checksum", "early")
		w.Header().Set("X-Kept", "1")
		w.WriteHeader(http.StatusCreated)
		io.WriteString(w, "body")
		w.Header().Set("X-Checksum", "abc")
	})
	srv := newMW(t, nil).Handler(h)
	do(srv, req{key: "k"})
	w := do(srv, req{key: "k"})
	if w.Code != http.StatusCreated || w.Header().Get("X-Kept") != "1" || w.Header().Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay: %d %v", w.Code, w.Header())
	}
	if v := w.Header().Values("X-Checksum"); len(v) != 0 || w.Header().Get("Trailer") != "" {
		t.Fatalf("trailer replayed as a header: %v", w.Header())
	}
}

// TestFencingToken: the handler's context carries the claim's attempt.
func TestFencingToken(t *testing.T) {
	var tok int64
	var ok bool
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { tok, ok = idem.FencingToken(r.Context()) })
	do(newMW(t, nil).Handler(h), req{key: "k"})
	if !ok || tok != 1 {
		t.Fatalf("token %d %v", tok, ok)
	}
}

// TestGuardOptionsPassThrough: WithGuard's namespace separates two
// middlewares on one store.
func TestGuardOptionsPassThrough(t *testing.T) {
	store := mustMem()
	h := &counter{}
	a := newMW(t, store, idemhttp.WithGuard(idem.WithNamespace("t", "a"))).Handler(h)
	b := newMW(t, store, idemhttp.WithGuard(idem.WithNamespace("t", "b"))).Handler(h)
	do(a, req{key: "k"})
	do(b, req{key: "k"})
	if h.runs.Load() != 2 {
		t.Fatalf("runs = %d, want 2", h.runs.Load())
	}
}

// TestGuardOptionsTable: the Guard options reach the Guard underneath: TTL
// (a record past it runs the handler again), secret (two secrets on one
// store share no records), observer (sees the claim and the hit).
func TestGuardOptionsTable(t *testing.T) {
	t.Run("TTL", func(t *testing.T) {
		var mu sync.Mutex
		now := time.Unix(1_700_000_000, 0)
		store := mustMem(memstore.WithClock(func() time.Time { mu.Lock(); defer mu.Unlock(); return now }))
		h := &counter{}
		srv := newMW(t, store, idemhttp.WithGuard(idem.WithTTL(time.Hour))).Handler(h)
		do(srv, req{key: "k"})
		mu.Lock()
		now = now.Add(59 * time.Minute)
		mu.Unlock()
		if w := do(srv, req{key: "k"}); w.Header().Get(idemhttp.ReplayedHeader) != "true" || h.runs.Load() != 1 {
			t.Fatalf("within the TTL: runs %d", h.runs.Load())
		}
		mu.Lock()
		now = now.Add(2 * time.Minute)
		mu.Unlock()
		if w := do(srv, req{key: "k"}); w.Header().Get(idemhttp.ReplayedHeader) != "" || h.runs.Load() != 2 {
			t.Fatalf("past the TTL: runs %d", h.runs.Load())
		}
	})
	t.Run("secret", func(t *testing.T) {
		store := mustMem()
		h := &counter{}
		a := newMW(t, store, idemhttp.WithGuard(idem.WithSecret([]byte("0123456789abcdef0123456789abcdef")))).Handler(h)
		b := newMW(t, store, idemhttp.WithGuard(idem.WithSecret([]byte("fedcba9876543210fedcba9876543210")))).Handler(h)
		do(a, req{key: "k"})
		do(b, req{key: "k"})
		if w := do(a, req{key: "k"}); w.Header().Get(idemhttp.ReplayedHeader) != "true" || h.runs.Load() != 2 {
			t.Fatalf("runs %d, want 2 (one per secret)", h.runs.Load())
		}
	})
	t.Run("observer", func(t *testing.T) {
		var c eventCounter
		srv := newMW(t, nil, idemhttp.WithGuard(idem.WithObserver(c.Observe))).Handler(&counter{})
		do(srv, req{key: "k"})
		do(srv, req{key: "k"})
		do(srv, req{key: "k", body: "other"})
		if c.Count(idem.EventClaim) != 1 || c.Count(idem.EventHit) != 1 || c.Count(idem.EventPayloadMismatch) != 1 {
			t.Fatalf("claims %d, hits %d, mismatches %d", c.Count(idem.EventClaim), c.Count(idem.EventHit), c.Count(idem.EventPayloadMismatch))
		}
	})
}

// TestInvalidOptions: every option checks its argument in New.
func TestInvalidOptions(t *testing.T) {
	tests := map[string]idemhttp.Option{
		"nil option":                                nil,
		"WithPrincipal(nil)":                        idemhttp.WithPrincipal(nil),
		"WithMethods()":                             idemhttp.WithMethods(),
		"WithMethods(bad)":                          idemhttp.WithMethods("PO ST"),
		"WithFingerprintHeaders":                    idemhttp.WithFingerprintHeaders("bad name"),
		"WithRecordStatus(nil)":                     idemhttp.WithRecordStatus(nil),
		"WithMaxBody(0)":                            idemhttp.WithMaxBody(0),
		"WithMaxBody(-1)":                           idemhttp.WithMaxBody(-1),
		"WithMaxRecordedBody(0)":                    idemhttp.WithMaxRecordedBody(0),
		"WithHeaderName(empty)":                     idemhttp.WithHeaderName(""),
		"WithHeaderName(bad)":                       idemhttp.WithHeaderName("Idempotency Key"),
		"WithGuard(WithTTL(0))":                     idemhttp.WithGuard(idem.WithTTL(0)),
		"WithGuard(RequireSecret)":                  idemhttp.WithGuard(idem.RequireSecret()),
		"WithSkip(nil)":                             idemhttp.WithSkip(nil),
		"WithReplayHeaders(nil)":                    idemhttp.WithReplayHeaders(nil),
		"WithMethods(post)":                         idemhttp.WithMethods("POST", "post"),
		"WithMethods(Patch)":                        idemhttp.WithMethods("Patch"),
		"WithFingerprintHeaders(Transfer-Encoding)": idemhttp.WithFingerprintHeaders("transfer-encoding"),
		"WithGuard(OnFailure(Lock))":                idemhttp.WithGuard(idem.OnFailure(idem.Lock)),
		"WithGuard(OnFailure(Lock)) among others": idemhttp.WithGuard(idem.WithNamespace("t", "s"),
			idem.OnFailure(idem.Lock), idem.OnDuplicate(idem.Wait)),
		"WithGuard(OnFailure(Lock), OnDuplicate(Raise))": idemhttp.WithGuard(idem.OnFailure(idem.Lock), idem.OnDuplicate(idem.Raise)),
	}
	for name, opt := range tests {
		t.Run(name, func(t *testing.T) {
			m, err := idemhttp.New(mustMem(), opt)
			if !errors.Is(err, idem.ErrInvalidOption) || m != nil {
				t.Fatalf("New = %v, %v; want ErrInvalidOption", m, err)
			}
		})
	}
	if _, err := idemhttp.New(nil); !errors.Is(err, idem.ErrInvalidOption) {
		t.Fatalf("nil store: %v", err)
	}
	_, err := idemhttp.New(mustMem(), idemhttp.WithMaxBody(0), nil, idemhttp.WithGuard(idem.WithTTL(0)))
	storetest.CheckOptionErrors(t, err, "idemhttp.WithMaxBody", "idemhttp.New", "WithTTL")
	// Valid, and New tells the Guard's failure policy without the user's
	// observer seeing anything.
	var events atomic.Int32
	obs := idem.Observer(func(context.Context, idem.Event) { events.Add(1) })
	if _, err := idemhttp.New(mustMem(), idemhttp.WithRequired(), idemhttp.WithReplaySetCookie(),
		idemhttp.WithFingerprintHeaders("X-A", "x-b", "host"), idemhttp.WithMethods("POST", "PUT", "PURGE", "post-it"),
		idemhttp.WithGuard(idem.OnFailure(idem.Lock), idem.OnFailure(idem.Unlock), idem.WithObserver(obs))); err != nil {
		t.Fatalf("valid options: %v", err)
	}
	if n := events.Load(); n != 0 {
		t.Fatalf("New sent %d events to the user's observer", n)
	}
}

// TestFingerprintHost: WithFingerprintHeaders("Host") fingerprints the
// request's host, which net/http keeps in r.Host, not in r.Header.
func TestFingerprintHost(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil, idemhttp.WithFingerprintHeaders("host")).Handler(h)
	send := func(host string) *httptest.ResponseRecorder {
		r := httptest.NewRequest("POST", "http://"+host+"/payments", strings.NewReader("x"))
		r.Header.Set("Idempotency-Key", "k")
		w := httptest.NewRecorder()
		srv.ServeHTTP(w, r)
		return w
	}
	if w := send("a.example"); w.Code != http.StatusCreated {
		t.Fatalf("first: %d %s", w.Code, w.Body)
	}
	if w := send("a.example"); w.Header().Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("same host: %d %v", w.Code, w.Header())
	}
	w := send("b.example")
	if w.Code != http.StatusUnprocessableEntity || problemOf(t, w).Type != idemhttp.ProblemKeyReused {
		t.Fatalf("another host: %d %s, want 422", w.Code, w.Body)
	}
	if h.runs.Load() != 1 {
		t.Fatalf("runs = %d", h.runs.Load())
	}
}

// TestOuterMaxBytesReader: a body cut short by an http.MaxBytesReader set
// before the middleware is a 413, as one over WithMaxBody is, with the
// handler not run.
func TestOuterMaxBytesReader(t *testing.T) {
	h := &counter{}
	inner := newMW(t, nil).Handler(h)
	srv := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		r.Body = http.MaxBytesReader(w, r.Body, 4)
		inner.ServeHTTP(w, r)
	})
	w := do(srv, req{key: "k", body: "12345"})
	if w.Code != http.StatusRequestEntityTooLarge || problemOf(t, w).Type != idemhttp.ProblemBodyTooLarge {
		t.Fatalf("%d %s, want 413", w.Code, w.Body)
	}
	if w := do(srv, req{key: "k", body: "1234"}); w.Code != http.StatusCreated {
		t.Fatalf("at the limit: %d %s", w.Code, w.Body)
	}
	if h.runs.Load() != 1 {
		t.Fatalf("runs = %d, want 1", h.runs.Load())
	}
}

// TestStoreRoundTrips: a fresh request costs 2 store round trips (claim,
// complete), a replay 1 (claim), a refusal before the claim none.
func TestStoreRoundTrips(t *testing.T) {
	store := storetest.Instrument(mustMem())
	srv := newMW(t, store).Handler(&counter{})
	do(srv, req{key: "k", body: "x"})
	if n := store.Total(); n != 2 || store.Count(storetest.OpClaim) != 1 || store.Count(storetest.OpComplete) != 1 {
		t.Fatalf("fresh request: %d round trips (claim %d, complete %d), want 2", n, store.Count(storetest.OpClaim), store.Count(storetest.OpComplete))
	}
	store.Reset()
	do(srv, req{key: "k", body: "x"})
	if n := store.Total(); n != 1 || store.Count(storetest.OpClaim) != 1 {
		t.Fatalf("replay: %d round trips, want 1", n)
	}
	store.Reset()
	do(srv, req{key: `"bad`})
	if n := store.Total(); n != 0 {
		t.Fatalf("invalid key: %d round trips, want 0", n)
	}
}

// TestStreaming: a handler that flushes (http.Flusher and
// http.ResponseController) streams to the first caller before it returns,
// and the replay gets the whole body.
func TestStreaming(t *testing.T) {
	release := make(chan struct{})
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rc := http.NewResponseController(w)
		if err := rc.SetWriteDeadline(time.Now().Add(10 * time.Second)); err != nil {
			t.Errorf("SetWriteDeadline: %v", err)
		}
		io.WriteString(w, "first\n")
		w.(http.Flusher).Flush()
		<-release
		io.WriteString(w, "second\n")
		if err := rc.Flush(); err != nil {
			t.Errorf("ResponseController.Flush: %v", err)
		}
	})
	ts := httptest.NewServer(newMW(t, nil).Handler(h))
	defer ts.Close()
	post := func() *http.Response {
		r, _ := http.NewRequest("POST", ts.URL, strings.NewReader("b"))
		r.Header.Set("Idempotency-Key", "stream")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	resp := post()
	buf := make([]byte, 6)
	if _, err := io.ReadFull(resp.Body, buf); err != nil || string(buf) != "first\n" {
		t.Fatalf("first chunk %q %v (not streamed before the handler returned)", buf, err)
	}
	close(release)
	rest, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(rest) != "second\n" {
		t.Fatalf("rest %q", rest)
	}
	resp = post()
	all, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if string(all) != "first\nsecond\n" || resp.Header.Get(idemhttp.ReplayedHeader) != "true" {
		t.Fatalf("replay %q %v", all, resp.Header)
	}
}

// TestHijackNotRecorded: a hijacked connection is not recorded; the claim
// is released.
func TestHijackNotRecorded(t *testing.T) {
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		runs.Add(1)
		c, bw, err := http.NewResponseController(w).Hijack()
		if err != nil {
			t.Errorf("Hijack: %v", err)
			return
		}
		bw.WriteString("HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
		bw.Flush()
		c.Close()
	})
	// Wait: the client has its answer before the claim is released.
	ts := httptest.NewServer(newMW(t, nil, idemhttp.WithGuard(idem.OnDuplicate(idem.Wait))).Handler(h))
	defer ts.Close()
	for i := 0; i < 2; i++ {
		r, _ := http.NewRequest("POST", ts.URL, nil)
		r.Header.Set("Idempotency-Key", "h")
		resp, err := http.DefaultClient.Do(r)
		if err != nil {
			t.Fatal(err)
		}
		io.ReadAll(resp.Body)
		resp.Body.Close()
	}
	if runs.Load() != 2 {
		t.Fatalf("runs = %d, want 2", runs.Load())
	}
}

// TestPanicReleases: a handler that panics releases its claim.
func TestPanicReleases(t *testing.T) {
	var runs atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			panic("boom")
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := newMW(t, nil).Handler(h)
	func() {
		defer func() { recover() }()
		do(srv, req{key: "k"})
	}()
	if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("%d, runs %d", w.Code, runs.Load())
	}
}

// TestConcurrentOneRun: many concurrent requests with one key in one
// process run the handler once; every one gets the response or a 409.
func TestConcurrentOneRun(t *testing.T) {
	h := &counter{}
	srv := newMW(t, nil, idemhttp.WithGuard(idem.OnDuplicate(idem.Wait))).Handler(h)
	var wg sync.WaitGroup
	bodies := make([]string, 50)
	for i := range bodies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			bodies[i] = do(srv, req{key: "k", body: "x"}).Body.String()
		}()
	}
	wg.Wait()
	for _, b := range bodies {
		if b != bodies[0] {
			t.Fatalf("bodies differ: %q %q", b, bodies[0])
		}
	}
	if h.runs.Load() != 1 {
		t.Fatalf("runs = %d", h.runs.Load())
	}
}

// TestClientGoneNotRecorded: a handler that returns without writing after
// its request context ended is not recorded (no empty 200 for the retry).
func TestClientGoneNotRecorded(t *testing.T) {
	var runs atomic.Int32
	ctx, cancel := context.WithCancel(context.Background())
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if runs.Add(1) == 1 {
			cancel() // the client leaves
			<-r.Context().Done()
			return
		}
		w.WriteHeader(http.StatusCreated)
	})
	srv := newMW(t, nil).Handler(h)
	do(srv, req{key: "k", ctx: ctx})
	if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated || runs.Load() != 2 {
		t.Fatalf("retry after the client left: %d, runs %d", w.Code, runs.Load())
	}
}

// TestCompleteFails: when the outcome cannot be recorded after the handler
// ran, the first caller still has its response, and a retry is told the
// key is in progress (not run again while the claim lives).
func TestCompleteFails(t *testing.T) {
	store := storetest.Instrument(mustMem())
	store.Before = func(ctx context.Context, op storetest.Op, key string) error {
		if op == storetest.OpComplete {
			return &idem.StoreError{Op: "complete", Err: errors.New("disk full"), Permanent: true}
		}
		return nil
	}
	h := &counter{}
	srv := newMW(t, store).Handler(h)
	if w := do(srv, req{key: "k"}); w.Code != http.StatusCreated || !strings.Contains(w.Body.String(), `"run":1`) {
		t.Fatalf("first caller: %d %s", w.Code, w.Body)
	}
	if w := do(srv, req{key: "k"}); w.Code != http.StatusConflict || h.runs.Load() != 1 {
		t.Fatalf("retry: %d %s, runs %d", w.Code, w.Body, h.runs.Load())
	}
}

// eventCounter is an Observer that counts events by kind.
type eventCounter struct {
	mu     sync.Mutex
	counts map[idem.EventKind]int64
}

func (c *eventCounter) Observe(_ context.Context, e idem.Event) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.counts == nil {
		c.counts = make(map[idem.EventKind]int64)
	}
	c.counts[e.Kind]++
}

func (c *eventCounter) Count(k idem.EventKind) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts[k]
}
