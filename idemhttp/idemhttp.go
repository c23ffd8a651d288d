package idemhttp

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// ReplayedHeader is set to "true" on every replayed response.
const ReplayedHeader = "Idempotent-Replayed"

// Middleware guards HTTP handlers with the Idempotency-Key header. It is
// safe for concurrent use; one Middleware may wrap many handlers (they then
// share one key space per principal: wrap each operation with its own
// Middleware, or give each a namespace with WithGuard(idem.WithNamespace),
// if the same key may be sent to two of them).
type Middleware struct {
	cfg   config
	guard *idem.Guard[response]
	// anonymous is the key prefix of the empty principal (no WithPrincipal).
	anonymous string
}

// response is what is recorded for a replay.
type response struct {
	Status int         `json:"status"`
	Header http.Header `json:"header,omitempty"`
	Body   []byte      `json:"body,omitempty"`
	// Omitted is set when the body was over the record limit: the first
	// caller got it, replays get ProblemResponseNotRecorded.
	Omitted bool `json:"omitted,omitempty"`

	// wire is the header section of a record, and
	// wireValues its number of values: decoded into the replay's header
	// map directly (see setHeaders), not into Header.
	wire       []byte
	wireValues int
	// raw is the whole record, as the middleware built it while the
	// handler's response was sent (see recorder): what Marshal stores.
	raw []byte
}

// errNotRecorded makes the Guard release the claim of a response the
// middleware does not record (a status WithRecordStatus refuses, a hijacked
// connection), so the next request with the key runs the handler again.
var errNotRecorded = errors.New("idemhttp: response not recorded")

// errHandlerPanicked releases the claim of a handler that panicked (or
// called runtime.Goexit); the panic goes on in the request's goroutine.
var errHandlerPanicked = errors.New("idemhttp: the handler panicked")

// New returns a Middleware whose records live in store. It fails with an
// error matching idem.ErrInvalidOption when an option (its own or one given
// to WithGuard) is invalid, or store is nil.
func New(store storekit.Store, opts ...Option) (*Middleware, error) {
	c := config{
		methods:         map[string]bool{http.MethodPost: true, http.MethodPatch: true},
		recordStatus:    DefaultRecordStatus,
		replayHeader:    DefaultReplayHeaders,
		maxBody:         DefaultMaxBody,
		maxRecordedBody: DefaultMaxRecordedBody,
		headerName:      DefaultHeaderName,
	}
	for _, o := range opts {
		if o == nil {
			c.invalid("New", "nil option")
			continue
		}
		o(&c)
	}
	// The recorded response has a format of its own (see record.go): a
	// codec given to WithGuard is overridden.
	g, err := idem.New[response](store, append(c.guardOpts[:len(c.guardOpts):len(c.guardOpts)], idem.WithCodec(recordCodec{}))...)
	if err != nil {
		c.errs = append(c.errs, err)
	} else if info, _ := guardinfo.Of(g); info.Lock {
		c.invalid("WithGuard", "idem.OnFailure(idem.Lock) is refused: a response the middleware does not record (a 5xx, a hijacked connection, a client gone) must release its claim, and Lock would keep it as a failure for the TTL (WithRecordStatus replays a 5xx instead)")
	}
	if len(c.errs) > 0 {
		return nil, errors.Join(c.errs...)
	}
	return &Middleware{cfg: c, guard: g, anonymous: principalPrefix("")}, nil
}

// Handler returns next guarded by m. It panics if next is nil, as
// http.Handle does.
func (m *Middleware) Handler(next http.Handler) http.Handler {
	if next == nil {
		panic("idemhttp: Handler: nil handler")
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { m.serve(w, r, next) })
}

func (m *Middleware) serve(w http.ResponseWriter, r *http.Request, next http.Handler) {
	if m.cfg.skip != nil && m.cfg.skip(r) {
		next.ServeHTTP(w, r)
		return
	}
	// Methods are matched in any case: a guarded method spelled otherwise
	// ("post") must not reach the handler unguarded. (ToUpper returns a
	// name already in upper case as it is.)
	if !m.cfg.methods[strings.ToUpper(r.Method)] {
		next.ServeHTTP(w, r)
		return
	}
	key, err := ParseKey(r.Header.Values(m.cfg.headerName))
	switch {
	case errors.Is(err, ErrNoKey):
		if !m.cfg.required {
			next.ServeHTTP(w, r)
			return
		}
		writeProblem(w, problem{Type: ProblemKeyMissing, Title: "Idempotency key missing", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("This operation requires the %s request header.", m.cfg.headerName)}, 0)
		return
	case err != nil:
		writeProblem(w, problem{Type: ProblemKeyInvalid, Title: "Invalid idempotency key", Status: http.StatusBadRequest,
			Detail: fmt.Sprintf("The %s header is invalid: %s.", m.cfg.headerName, err.(*storekit.KeyError).Reason)}, 0)
		return
	}
	principal := ""
	if m.cfg.principal != nil {
		// An empty name identifies nobody: were it accepted, every caller
		// the function cannot name would share one key space.
		if principal, err = m.cfg.principal(r); err != nil || principal == "" {
			writeProblem(w, problem{Type: ProblemUnauthorized, Title: "Caller not identified", Status: http.StatusUnauthorized,
				Detail: "The request does not say who is asking, so its idempotency key cannot be scoped."}, 0)
			return
		}
	}
	body, ok := m.readBody(w, r)
	if !ok {
		return
	}
	fp := m.fingerprint(r, body)
	scoped := m.anonymous + key
	if principal != "" {
		scoped = principalPrefix(principal) + key
	}

	v, err, ran := m.do(w, r, scoped, fp, body, next)
	if ran {
		return // the first caller was served by the handler itself
	}
	if err == nil {
		m.replay(w, v)
		return
	}
	m.writeError(w, r, scoped, err)
}

// writeError answers a request whose call returned err (not served by the
// handler, not a replay) with the problem document err stands for.
func (m *Middleware) writeError(w http.ResponseWriter, r *http.Request, scoped string, err error) {
	var se *idem.StoreError
	switch {
	case errors.Is(err, idem.ErrPayloadMismatch):
		writeProblem(w, problem{Type: ProblemKeyReused, Title: "Idempotency key reused", Status: http.StatusUnprocessableEntity,
			Detail: "This idempotency key was already used with a different request."}, 0)
	case errors.Is(err, idem.ErrInProgress):
		writeProblem(w, problem{Type: ProblemInProgress, Title: "Request in progress", Status: http.StatusConflict,
			Detail: "A request with this idempotency key is being processed; retry later."}, m.retryAfter(r.Context(), scoped))
	case errors.Is(err, idem.ErrDuplicate):
		writeProblem(w, problem{Type: ProblemAlreadyProcessed, Title: "Request already processed", Status: http.StatusConflict,
			Detail: "A request with this idempotency key was already processed."}, 0)
	case errors.Is(err, idem.ErrPreviousFailure):
		writeProblem(w, problem{Type: ProblemInternal, Title: "Previous request failed", Status: http.StatusInternalServerError,
			Detail: "A request with this idempotency key failed, and its failure is kept."}, 0)
	case errors.Is(err, idem.ErrCorruptRecord):
		// Never another response: a record that fails its length or
		// checksum is not replayed.
		writeProblem(w, problem{Type: ProblemInternal, Title: "Idempotency record damaged", Status: http.StatusInternalServerError,
			Detail: "A request with this idempotency key was processed, but its recorded response is damaged and cannot be replayed."}, 0)
	case errors.As(err, &se):
		writeProblem(w, problem{Type: ProblemStoreUnavailable, Title: "Idempotency store unavailable", Status: http.StatusServiceUnavailable,
			Detail: "The request was not processed; retry later."}, 1)
	default:
		writeProblem(w, problem{Type: ProblemInternal, Title: "Idempotency record unavailable", Status: http.StatusInternalServerError,
			Detail: "The record of this idempotency key cannot be read."}, 0)
	}
}

// principalPrefix is the key prefix of a principal: its hash, so no
// principal/key pair can be spelled like another, and a colon.
func principalPrefix(principal string) string {
	ph := sha256.Sum256([]byte(principal))
	var b [2*sha256.Size + 1]byte
	hex.Encode(b[:], ph[:])
	b[len(b)-1] = ':'
	return string(b[:])
}

// readBody reads the whole request body, up to the limit, and hands the
// request a copy. ok is false when a problem has been written instead.
func (m *Middleware) readBody(w http.ResponseWriter, r *http.Request) (body []byte, ok bool) {
	tooLarge := func() {
		writeProblem(w, problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("The request body is over %d bytes.", m.cfg.maxBody)}, 0)
	}
	if r.ContentLength > m.cfg.maxBody {
		tooLarge()
		return nil, false
	}
	if r.Body == nil || r.Body == http.NoBody {
		return nil, true
	}
	limit := m.cfg.maxBody
	if limit < math.MaxInt64 {
		limit++ // one byte more tells a body over the limit
	}
	var err error
	if cl := r.ContentLength; cl >= 0 {
		// The length is known: one buffer, with a byte more to tell a body
		// longer than announced.
		buf := make([]byte, cl+1)
		n, rerr := io.ReadFull(r.Body, buf)
		switch {
		case rerr == io.EOF || rerr == io.ErrUnexpectedEOF:
			body = buf[:n]
		case rerr != nil:
			err = rerr
		default: // more than announced: read on, up to the limit
			body, err = io.ReadAll(io.LimitReader(io.MultiReader(bytes.NewReader(buf), r.Body), limit))
		}
	} else {
		body, err = io.ReadAll(io.LimitReader(r.Body, limit))
	}
	if err != nil {
		return nil, readFailed(w, err)
	}
	if int64(len(body)) > m.cfg.maxBody {
		tooLarge()
		return nil, false
	}
	return body, true
}

// readFailed writes the problem for a request body that could not be read
// (a function of its own, so that errors.As's target is allocated only on
// this path). It returns false.
func readFailed(w http.ResponseWriter, err error) bool {
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		// A limit set before the middleware (http.MaxBytesReader) is
		// lower than ours: the body is too large all the same.
		writeProblem(w, problem{Type: ProblemBodyTooLarge, Title: "Request body too large", Status: http.StatusRequestEntityTooLarge,
			Detail: fmt.Sprintf("The request body is over %d bytes.", mbe.Limit)}, 0)
		return false
	}
	writeProblem(w, problem{Type: "about:blank", Title: "Bad Request", Status: http.StatusBadRequest,
		Detail: "The request body could not be read."}, 0)
	return false
}

// fingerprint is the hash a replay must match: method, escaped path, raw
// query, the SHA-256 of the body, and the fingerprinted headers (Host read
// from r.Host, where net/http puts it), each length-prefixed.
func (m *Middleware) fingerprint(r *http.Request, body []byte) string {
	var buf [512]byte
	b := appendField(buf[:0], "idemhttp/fingerprint/v1")
	b = appendField(b, r.Method)
	b = appendField(b, r.URL.EscapedPath())
	b = appendField(b, r.URL.RawQuery)
	bs := sha256.Sum256(body)
	b = binary.BigEndian.AppendUint64(b, uint64(len(bs)))
	b = append(b, bs[:]...)
	for _, name := range m.cfg.fpHeaders {
		b = appendField(b, name)
		vals := r.Header.Values(name)
		if name == "Host" {
			// net/http moves a server request's Host header to r.Host.
			vals = nil
			if r.Host != "" {
				vals = []string{r.Host}
			}
		}
		var n [20]byte
		count := strconv.AppendInt(n[:0], int64(len(vals)), 10)
		b = binary.BigEndian.AppendUint64(b, uint64(len(count)))
		b = append(b, count...)
		for _, v := range vals {
			b = appendField(b, v)
		}
	}
	sum := sha256.Sum256(b)
	var hexed [2 * sha256.Size]byte
	hex.Encode(hexed[:], sum[:])
	return string(hexed[:])
}

// appendField appends s, length-prefixed.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// run serves a first request: the handler writes to the client through a
// recorder, and what it wrote becomes the record.
func (m *Middleware) run(ctx context.Context, w http.ResponseWriter, r *http.Request, body []byte, next http.Handler) (response, error) {
	rec := &recorder{w: w, m: m, max: m.cfg.maxRecordedBody}
	// Headers set in front of the middleware (a request id, CORS) are not
	// the handler's: the layers in front set them on each replay too.
	if len(w.Header()) > 0 {
		rec.before = w.Header().Clone()
	}
	r2 := r.WithContext(ctx)
	if body != nil {
		r2.Body = newBodyReader(body)
		r2.GetBody = func() (io.ReadCloser, error) { return newBodyReader(body), nil }
	}
	next.ServeHTTP(rec, r2)
	if rec.hijacked {
		return response{}, errNotRecorded
	}
	if !rec.wrote {
		if ctx.Err() != nil {
			// The handler gave up on a request whose client left (or whose
			// claim lapsed): an empty 200 is not its answer to replay.
			return response{}, errNotRecorded
		}
		// net/http sends a 200 with the headers as they are now.
		rec.status = http.StatusOK
		rec.head(http.StatusOK, w.Header()) // an empty 200 whose headers alone are over the limit is too large
	}
	if !m.cfg.recordStatus(rec.status) {
		return response{}, errNotRecorded
	}
	if rec.tooLarge {
		// Neither headers nor body: the replay is a problem document.
		return response{Status: rec.status, Omitted: true, raw: omitted(rec.status)}, nil
	}
	return response{Status: rec.status, raw: seal(rec.rec, len(rec.rec)-rec.bodyAt)}, nil
}

// bodyReader is a request body read from memory: a bytes.Reader with a
// Close that does nothing (one allocation, where io.NopCloser over a
// bytes.Reader makes two).
type bodyReader struct{ bytes.Reader }

func newBodyReader(b []byte) *bodyReader {
	r := new(bodyReader)
	r.Reset(b)
	return r
}

// Close does nothing.
func (*bodyReader) Close() error { return nil }

// hopByHop are the response headers that describe one connection, not the
// response (RFC 9110 section 7.6.1), and are never recorded.
var hopByHop = []string{"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

// appendHeaders appends to b, in the record's format (see record.go), the
// headers of sent to record. Recorded are the headers the handler set: those whose
// values differ from before (the map as the handler got it), and, with no
// value, those it deleted; of them, all but hop-by-hop ones (and those
// named in Connection), trailers (those named in Trailer, which net/http
// sends after the body, not as headers), the middleware's own, Set-Cookie
// unless WithReplaySetCookie, and those WithReplayHeaders refuses.
func (m *Middleware) appendHeaders(b []byte, before, sent http.Header) []byte {
	var named []string // named in Connection or Trailer: canonical
	for _, field := range [2]string{"Connection", "Trailer"} {
		for _, c := range sent[field] {
			for name := range strings.SplitSeq(c, ",") {
				if name = textproto.TrimString(name); name != "" {
					named = append(named, textproto.CanonicalMIMEHeaderKey(name))
				}
			}
		}
	}
	drop := func(k string) bool {
		switch {
		case slices.Contains(hopByHop, k) || k == ReplayedHeader || strings.HasPrefix(k, http.TrailerPrefix) || slices.Contains(named, k):
			return true
		case strings.EqualFold(k, "Set-Cookie"):
			return !m.cfg.replayCookies
		}
		return false
	}
	set := func(k string, v []string) bool {
		bv, had := before[k]
		// A header without a value (h["Date"] = nil: net/http sends none)
		// is recorded as removed whatever WithReplayHeaders says: it
		// carries nothing of one response's.
		return (!had || !slices.Equal(v, bv) || (v == nil) != (bv == nil)) && !drop(k) && (len(v) == 0 || m.cfg.replayHeader(k))
	}
	deleted := func(k string) bool {
		_, ok := sent[k]
		return !ok && !drop(k)
	}
	n := 0
	for k, vs := range sent {
		if set(k, vs) {
			n++
		}
	}
	for k := range before {
		if deleted(k) {
			n++
		}
	}
	b = binary.AppendUvarint(b, uint64(n))
	for k, vs := range sent {
		if set(k, vs) {
			b = appendHeader(b, k, vs)
		}
	}
	for k := range before {
		if deleted(k) {
			b = appendHeader(b, k, nil) // no value: h[k] = nil keeps net/http from adding one
		}
	}
	return b
}

// replay writes a recorded response.
func (m *Middleware) replay(w http.ResponseWriter, v response) {
	h := w.Header()
	if v.Omitted {
		h.Set(ReplayedHeader, "true")
		writeProblem(w, problem{Type: ProblemResponseNotRecorded, Title: "Response not recorded", Status: http.StatusConflict,
			Detail:         fmt.Sprintf("The request with this idempotency key was processed, but its response was over %d bytes and was not kept.", m.cfg.maxRecordedBody),
			OriginalStatus: v.Status}, 0)
		return
	}
	v.setHeaders(h)
	h.Set(ReplayedHeader, "true")
	w.WriteHeader(v.Status)
	if len(v.Body) > 0 {
		_, _ = w.Write(v.Body)
	}
}
