package idemlambda

import (
	"bytes"
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-lambda-go/events"
	"github.com/idem-go/idem/idemhttp"
	"github.com/idem-go/idem/storekit"
)

// base64Header marks, between the handler and the record, a response whose
// handler set IsBase64Encoded: the record holds the decoded bytes and this
// header, and the response an adapter returns carries neither (its body is
// encoded again, IsBase64Encoded set).
const base64Header = "Idemlambda-Base64-Encoded"

// APIGateway returns h, a handler of API Gateway REST API proxy events,
// answered with idemhttp's semantics: the Idempotency-Key request header
// names the operation (scoped by idemhttp.WithPrincipal when given), the
// first request runs h and its status, headers and body are recorded, and a
// repeat gets them back byte for byte with "Idempotent-Replayed: true". A
// repeat while the first runs gets a 409 problem document with a
// Retry-After (or waits, with WithGuard(idem.OnDuplicate(idem.Wait))); the
// key with another request (method, path, query, body) a 422; a 5xx
// response (and 408, 425, 429) is not recorded. Requests of other methods
// than POST and PATCH (idemhttp.WithMethods) and without the header (unless
// idemhttp.WithRequired) pass through to h. Every refusal is the problem
// document idemhttp writes, with h not run. An error of h is returned as
// h's error (API Gateway answers 502) and releases the claim.
//
// Headers come back canonical ("Content-Type"), single values in Headers
// and repeated ones in MultiValueHeaders; a body h marked IsBase64Encoded
// comes back so marked (see WithHTTP for options, and the package doc for
// what a replay holds).
//
// APIGateway fails with an error matching idem.ErrInvalidOption when an
// option (its own, WithHTTP's or WithGuard's) is invalid, h is nil, or
// store is nil.
func APIGateway(store storekit.Store, h func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), opts ...Option) (func(context.Context, events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error), error) {
	a, err := newHTTPAdapter(store, h == nil, "APIGateway", opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.APIGatewayProxyRequest) (events.APIGatewayProxyResponse, error) {
		r := newRequest(context.WithValue(a.c.invocation(ctx), restKey{}, ev), ev.HTTPMethod, ev.Path, restQuery(ev), restHeader(ev), ev.Body, ev.IsBase64Encoded)
		w, err := a.serve(r, func(ctx context.Context, w http.ResponseWriter) error {
			resp, err := h(ctx, ev)
			if err != nil {
				return err
			}
			writeResponse(w, resp.StatusCode, resp.Headers, resp.MultiValueHeaders, nil, resp.Body, resp.IsBase64Encoded)
			return nil
		})
		if err != nil {
			return events.APIGatewayProxyResponse{}, err
		}
		resp := events.APIGatewayProxyResponse{StatusCode: w.status}
		resp.Body, resp.IsBase64Encoded = w.bodyOut()
		for _, k := range w.names() {
			vs := w.header[k]
			if len(vs) == 1 {
				if resp.Headers == nil {
					resp.Headers = map[string]string{}
				}
				resp.Headers[k] = vs[0]
				continue
			}
			if resp.MultiValueHeaders == nil {
				resp.MultiValueHeaders = map[string][]string{}
			}
			resp.MultiValueHeaders[k] = vs
		}
		return resp, nil
	}, nil
}

// APIGatewayV2 is APIGateway for HTTP APIs (payload format 2.0): the
// same semantics, for events.APIGatewayV2HTTPRequest. Cookies of the
// request are its Cookie header; Set-Cookie headers of the response are its
// Cookies (recorded only with idemhttp.WithReplaySetCookie); a header with
// more than one value comes back as one, its values joined with ", ".
func APIGatewayV2(store storekit.Store, h func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), opts ...Option) (func(context.Context, events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error), error) {
	a, err := newHTTPAdapter(store, h == nil, "APIGatewayV2", opts)
	if err != nil {
		return nil, err
	}
	return func(ctx context.Context, ev events.APIGatewayV2HTTPRequest) (events.APIGatewayV2HTTPResponse, error) {
		hdr := make(http.Header, len(ev.Headers)+1)
		for k, v := range ev.Headers {
			hdr[http.CanonicalHeaderKey(k)] = []string{v}
		}
		if len(ev.Cookies) > 0 {
			hdr["Cookie"] = []string{strings.Join(ev.Cookies, "; ")}
		}
		r := newRequest(context.WithValue(a.c.invocation(ctx), httpKey{}, ev), ev.RequestContext.HTTP.Method, ev.RawPath, ev.RawQueryString, hdr, ev.Body, ev.IsBase64Encoded)
		w, err := a.serve(r, func(ctx context.Context, w http.ResponseWriter) error {
			resp, err := h(ctx, ev)
			if err != nil {
				return err
			}
			writeResponse(w, resp.StatusCode, resp.Headers, resp.MultiValueHeaders, resp.Cookies, resp.Body, resp.IsBase64Encoded)
			return nil
		})
		if err != nil {
			return events.APIGatewayV2HTTPResponse{}, err
		}
		resp := events.APIGatewayV2HTTPResponse{StatusCode: w.status}
		resp.Body, resp.IsBase64Encoded = w.bodyOut()
		for _, k := range w.names() {
			vs := w.header[k]
			if k == "Set-Cookie" {
				resp.Cookies = append(resp.Cookies, vs...)
				continue
			}
			if resp.Headers == nil {
				resp.Headers = map[string]string{}
			}
			resp.Headers[k] = strings.Join(vs, ", ")
		}
		return resp, nil
	}, nil
}

type (
	restKey struct{}
	httpKey struct{}
)

// APIGatewayRequest returns the REST API event an APIGateway handler is
// serving, from the context of the *http.Request an idemhttp.WithPrincipal
// function is given (to read the authorizer's principal, say).
func APIGatewayRequest(ctx context.Context) (events.APIGatewayProxyRequest, bool) {
	ev, ok := ctx.Value(restKey{}).(events.APIGatewayProxyRequest)
	return ev, ok
}

// APIGatewayV2Request returns the HTTP API event an APIGatewayV2 handler is
// serving, from the context of the *http.Request an idemhttp.WithPrincipal
// function is given.
func APIGatewayV2Request(ctx context.Context) (events.APIGatewayV2HTTPRequest, bool) {
	ev, ok := ctx.Value(httpKey{}).(events.APIGatewayV2HTTPRequest)
	return ev, ok
}

// httpAdapter answers API Gateway events through an idemhttp Middleware.
type httpAdapter struct {
	c *config
	m *idemhttp.Middleware
}

func newHTTPAdapter(store storekit.Store, nilHandler bool, name string, opts []Option) (*httpAdapter, error) {
	c, err := newConfig(kindHTTP, opts)
	if err != nil {
		return nil, err
	}
	if nilHandler {
		return nil, optionError(name, "handler is nil")
	}
	if store == nil {
		return nil, optionError(name, "store is nil")
	}
	hopts := append(c.httpOpts[:len(c.httpOpts):len(c.httpOpts)], idemhttp.WithGuard(c.guardOptions()...))
	m, err := idemhttp.New(wrapStore(store), hopts...)
	if err != nil {
		return nil, err
	}
	return &httpAdapter{c: c, m: m}, nil
}

// handlerFailed carries the error of an API Gateway handler through the
// middleware as a panic: the middleware releases the claim of a handler
// that panics, whatever idemhttp.WithRecordStatus would record, and the
// panic comes back to serve, which returns the error.
type handlerFailed struct{ err error }

// serve runs r through the middleware; run is the handler, writing its
// response to w, called when the middleware lets the request through.
func (a *httpAdapter) serve(r *http.Request, run func(ctx context.Context, w http.ResponseWriter) error) (w *response, err error) {
	w = &response{header: http.Header{}}
	defer func() {
		if p := recover(); p != nil {
			hf, ok := p.(handlerFailed)
			if !ok {
				panic(p)
			}
			w, err = nil, hf.err
		}
	}()
	a.m.Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if err := run(r.Context(), w); err != nil {
			panic(handlerFailed{err})
		}
	})).ServeHTTP(w, r)
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w, nil
}

// newRequest is the *http.Request of an API Gateway event.
func newRequest(ctx context.Context, method, path, rawQuery string, header http.Header, body string, b64 bool) *http.Request {
	b := []byte(body)
	if b64 {
		if d, err := base64.StdEncoding.DecodeString(body); err == nil {
			b = d
		}
	}
	u := &url.URL{Path: path, RawQuery: rawQuery}
	if p, err := url.PathUnescape(path); err == nil && p != path {
		u.Path, u.RawPath = p, path
	}
	r := (&http.Request{
		Method: method, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: header, Host: header.Get("Host"), RequestURI: u.RequestURI(),
		ContentLength: int64(len(b)), Body: http.NoBody,
	}).WithContext(ctx)
	if len(b) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	return r
}

// restHeader is the header of a REST API event: its multi-value headers,
// or its headers when it has none.
func restHeader(ev events.APIGatewayProxyRequest) http.Header {
	h := make(http.Header, len(ev.Headers))
	if len(ev.MultiValueHeaders) > 0 {
		for k, vs := range ev.MultiValueHeaders {
			h[http.CanonicalHeaderKey(k)] = append(h[http.CanonicalHeaderKey(k)], vs...)
		}
		return h
	}
	for k, v := range ev.Headers {
		h[http.CanonicalHeaderKey(k)] = []string{v}
	}
	return h
}

// restQuery is the query of a REST API event, its parameters encoded in
// key order.
func restQuery(ev events.APIGatewayProxyRequest) string {
	q := url.Values{}
	if len(ev.MultiValueQueryStringParameters) > 0 {
		for k, vs := range ev.MultiValueQueryStringParameters {
			q[k] = vs
		}
	} else {
		for k, v := range ev.QueryStringParameters {
			q[k] = []string{v}
		}
	}
	return q.Encode()
}

// writeResponse writes an API Gateway response to w: headers, then
// multi-value headers (which win for a name both have, as API Gateway
// merges them), cookies as Set-Cookie, and the body, decoded when it is
// base64 (base64Header then says so).
func writeResponse(w http.ResponseWriter, status int, headers map[string]string, multi map[string][]string, cookies []string, body string, b64 bool) {
	h := w.Header()
	for k, v := range headers {
		h.Set(k, v)
	}
	for k, vs := range multi {
		h[http.CanonicalHeaderKey(k)] = append([]string(nil), vs...)
	}
	for _, c := range cookies {
		h.Add("Set-Cookie", c)
	}
	b := []byte(body)
	if b64 {
		if d, err := base64.StdEncoding.DecodeString(body); err == nil {
			b = d
			h.Set(base64Header, "true")
		}
	}
	if status == 0 {
		status = http.StatusOK
	}
	h.Set("Content-Length", strconv.Itoa(len(b)))
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// response is the http.ResponseWriter an adapter's request is served to.
type response struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (w *response) Header() http.Header { return w.header }

func (w *response) WriteHeader(status int) {
	if w.status == 0 {
		w.status = status
	}
}

func (w *response) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.body.Write(b)
}

// names are the response's header names with values, sorted, without the
// base64 mark and Content-Length (API Gateway sets it).
func (w *response) names() []string {
	ks := make([]string, 0, len(w.header))
	for k, vs := range w.header {
		if len(vs) > 0 && k != base64Header && k != "Content-Length" {
			ks = append(ks, k)
		}
	}
	sort.Strings(ks)
	return ks
}

// bodyOut is the response's body as API Gateway takes it: base64 when the
// handler's was (or when it is not UTF-8 text, which JSON cannot carry).
func (w *response) bodyOut() (string, bool) {
	b := w.body.Bytes()
	if w.header.Get(base64Header) == "true" || !utf8.Valid(b) {
		return base64.StdEncoding.EncodeToString(b), true
	}
	return string(b), false
}
