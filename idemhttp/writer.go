package idemhttp

import (
	"bufio"
	"encoding/binary"
	"net"
	"net/http"
)

// recorder is the ResponseWriter the handler gets on a first request: every
// call goes straight through to the client's writer (so streaming works as
// without the middleware) and the status, headers and body are copied for
// the record, headers and body up to max bytes together.
type recorder struct {
	w        http.ResponseWriter
	m        *Middleware
	before   http.Header // the headers set in front of the middleware
	max      int64       // the record limit; less the headers' size once they are sent
	status   int
	wrote    bool
	rec      []byte // the recorded response as it is sent: format, status, flags, headers, then the body
	bodyAt   int    // where the body starts in rec
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
	r.head(code, r.w.Header())
	r.w.WriteHeader(code)
}

// head starts the record with the status and the headers as sent (what
// the handler set of them: see Middleware.appendHeaders): the snapshot a
// replay sends, taken when net/http sends them.
func (r *recorder) head(code int, sent http.Header) {
	size := headerSize(sent)
	// One buffer for the record: the headers are at most as long as sent,
	// and room for a small body.
	r.rec = make([]byte, 0, 16+trailerLen+size+512)
	r.rec = append(r.rec, recordFormat)
	r.rec = binary.AppendUvarint(r.rec, uint64(code))
	r.rec = append(r.rec, 0) // flags
	r.rec = r.m.appendHeaders(r.rec, r.before, sent)
	r.bodyAt = len(r.rec)
	r.max -= size
	if r.max < 0 {
		r.tooLarge = true
	}
}

func (r *recorder) Write(p []byte) (int, error) {
	if !r.wrote {
		r.WriteHeader(http.StatusOK)
	}
	if !r.tooLarge {
		if int64(len(r.rec)-r.bodyAt)+int64(len(p)) > r.max {
			r.tooLarge = true
			r.rec = r.rec[:r.bodyAt]
		} else {
			r.rec = append(r.rec, p...)
		}
	}
	return r.w.Write(p)
}

// omitted is the record of a response over the limit: its status, no
// headers, no body, flagOmitted.
func omitted(status int) []byte {
	return (&response{Status: status, Omitted: true}).appendTo(nil)
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
