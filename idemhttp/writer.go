package idemhttp

import (
	"bufio"
	"bytes"
	"net"
	"net/http"
)

// recorder is the ResponseWriter the handler gets on a first request: every
// call goes straight through to the client's writer (so streaming works as
// without the middleware) and the status, headers and body are copied for
// the record, headers and body up to max bytes together.
type recorder struct {
	w        http.ResponseWriter
	max      int64 // the record limit; less the headers' size once they are sent
	status   int
	header   http.Header // the headers as sent with the status line
	wrote    bool
	body     bytes.Buffer
	tooLarge bool
	hijacked bool // the connection was taken over: nothing to record
}

func (r *recorder) Header() http.Header { return r.w.Header() }

func (r *recorder) WriteHeader(code int) {
	if r.wrote {
		r.w.WriteHeader(code) // superfluous: net/http logs it
		return
	}
	if code >= 100 && code < 200 && code != http.StatusSwitchingProtocols {
		r.w.WriteHeader(code) // informational: not the final response
		return
	}
	if code == http.StatusSwitchingProtocols {
		r.hijacked = true
	}
	r.wrote, r.status = true, code
	r.header = r.w.Header().Clone()
	r.max -= headerSize(r.header)
	if r.max < 0 {
		r.tooLarge = true
	}
	r.w.WriteHeader(code)
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if !r.tooLarge {
		if int64(r.body.Len())+int64(len(p)) > r.max {
			r.tooLarge = true
			r.body = bytes.Buffer{}
		} else {
			r.body.Write(p)
		}
	}
	return r.w.Write(p)
}

// Flush implements http.Flusher.
func (r *recorder) Flush() { _ = r.FlushError() }

// FlushError is what http.ResponseController.Flush calls.
func (r *recorder) FlushError() error {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	return http.NewResponseController(r.w).Flush()
}

// Hijack implements http.Hijacker (and http.ResponseController.Hijack): a
// hijacked response is not recorded.
func (r *recorder) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	r.hijacked = true
	return http.NewResponseController(r.w).Hijack()
}

// Unwrap lets http.ResponseController reach the client's writer for
// deadlines and full duplex.
func (r *recorder) Unwrap() http.ResponseWriter { return r.w }

// headerSize is the size of h as sent on the wire ("Name: value\r\n" per
// value).
func headerSize(h http.Header) int64 {
	var n int64
	for k, vs := range h {
		for _, v := range vs {
			n += int64(len(k) + len(v) + 4)
		}
	}
	return n
}
