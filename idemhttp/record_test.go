package idemhttp

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"testing"
)

// headersOf returns the headers a replay of r sets.
func headersOf(r *response) http.Header {
	h := http.Header{}
	r.setHeaders(h)
	return h
}

func TestRecordRoundTrip(t *testing.T) {
	for _, r := range []response{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}, "Date": nil}, Body: []byte(`{"id":1}`)},
		{Status: 200},
		{Status: 204, Header: http.Header{"X-Empty": {""}}},
		{Status: 409, Omitted: true},
		{Status: 999, Body: bytes.Repeat([]byte{0, 1, 0xff}, 1000)},
	} {
		b, err := recordCodec{}.Marshal(r)
		if err != nil {
			t.Fatal(err)
		}
		var got response
		if err := (recordCodec{}).Unmarshal(b, &got); err != nil {
			t.Fatalf("%+v: %v", r, err)
		}
		if got.Status != r.Status || got.Omitted != r.Omitted || !bytes.Equal(got.Body, r.Body) {
			t.Fatalf("decoded %+v, want %+v", got, r)
		}
		want := http.Header{}
		for k, v := range r.Header {
			want[k] = append([]string(nil), v...)
		}
		if h := headersOf(&got); !reflect.DeepEqual(h, want) {
			t.Fatalf("headers %#v, want %#v", h, want)
		}
	}
}

func TestRecordRefusesMalformed(t *testing.T) {
	good, _ := recordCodec{}.Marshal(response{Status: 200, Header: http.Header{"A": {"b"}}})
	for name, b := range map[string][]byte{
		"empty":          nil,
		"unknown format": {9, 200, 1, 0},
		"status 0":       {recordFormat, 0, 0, 0},
		"status 1000":    {recordFormat, 0xe8, 0x07, 0, 0},
		"unknown flag":   {recordFormat, 200, 1, 2, 0},
		"truncated":      good[:len(good)-1],
		"byte appended":  append(good[:len(good):len(good)], 0),
		"format 1":       append([]byte{1}, good[1:]...),
		"trailer only":   seal([]byte{recordFormat}, 0),
		"body too short": resealed(good, 1),
		"body too long":  resealed(good, -1),
		"flipped bit":    flipped(good, 3),
		"huge count":     {recordFormat, 200, 1, 0, 0xff, 0xff, 0xff, 0xff, 0x0f},
		"json status 0":  []byte(`{"status":0}`),
		"bad json":       []byte(`{"status":`),
	} {
		var r response
		if err := (recordCodec{}).Unmarshal(b, &r); err == nil {
			t.Errorf("%s: decoded %+v", name, r)
		} else if name != "bad json" && !errors.Is(err, errBadRecord) {
			t.Errorf("%s: %v, want errBadRecord", name, err)
		}
	}
}

// resealed is the record b with its body length off by delta and a
// checksum that matches.
func resealed(b []byte, delta int) []byte {
	n := int(binary.BigEndian.Uint64(b[len(b)-trailerLen:]))
	return seal(append([]byte(nil), b[:len(b)-trailerLen]...), n+delta)
}

// flipped is b with one bit of byte i flipped.
func flipped(b []byte, i int) []byte {
	b = append([]byte(nil), b...)
	b[i] ^= 1
	return b
}

// FuzzRecordDecode checks that no input makes the decoder panic, and that
// what it accepts encodes back to a record that decodes alike. Each input
// is decoded as it is, and sealed: with a trailer whose checksum matches
// and whose body length is bodyLen, so that the fuzzer reaches past the
// checksum into the rest of the format.
func FuzzRecordDecode(f *testing.F) {
	for _, r := range []response{
		{Status: 201, Header: http.Header{"Content-Type": {"application/json"}, "X-Multi": {"a", "b"}, "Date": nil}, Body: []byte(`{"id":1}`)},
		{Status: 409, Omitted: true},
	} {
		b, _ := recordCodec{}.Marshal(r)
		f.Add(b, uint16(0))
		f.Add(b[:len(b)-trailerLen], uint16(len(r.Body)))
		j, _ := json.Marshal(r)
		f.Add(j, uint16(3))
	}
	f.Fuzz(func(t *testing.T, data []byte, bodyLen uint16) {
		roundTrip(t, data)
		roundTrip(t, seal(append([]byte(nil), data...), int(bodyLen)))
	})
}

// roundTrip checks that data, if it decodes, encodes back to a record that
// decodes alike.
func roundTrip(t *testing.T, data []byte) {
	var r response
	if err := (recordCodec{}).Unmarshal(data, &r); err != nil {
		if !errors.Is(err, errBadRecord) {
			t.Fatalf("error %v does not match errBadRecord", err)
		}
		return
	}
	h := headersOf(&r)
	again := response{Status: r.Status, Omitted: r.Omitted, Header: h, Body: r.Body}
	b, err := recordCodec{}.Marshal(again)
	if err != nil {
		t.Fatal(err)
	}
	var r2 response
	if err := (recordCodec{}).Unmarshal(b, &r2); err != nil {
		t.Fatalf("re-encoded record does not decode: %v", err)
	}
	if r2.Status != r.Status || r2.Omitted != r.Omitted || !bytes.Equal(r2.Body, r.Body) {
		t.Fatalf("round trip: %+v, want %+v", r2, r)
	}
	if h2 := headersOf(&r2); !reflect.DeepEqual(h2, nilValues(h)) {
		t.Fatalf("round trip headers: %#v, want %#v", h2, h)
	}
}

// nilValues returns h with empty value lists as nil, as a replay sets them.
func nilValues(h http.Header) http.Header {
	out := http.Header{}
	for k, v := range h {
		if len(v) == 0 {
			v = nil
		}
		out[k] = v
	}
	return out
}

// TestReadBodyLengthMismatch checks that a body longer or shorter than its
// announced length is read as it is.
func TestReadBodyLengthMismatch(t *testing.T) {
	m := &Middleware{cfg: config{maxBody: 5}}
	for _, c := range []struct {
		announced int64
		body      string
		ok        bool
	}{{3, "abcd", true}, {3, "abcdef", false}, {5, "ab", true}, {0, "", true}, {1, "abcde", true}} {
		r, _ := http.NewRequest("POST", "/", bytes.NewReader([]byte(c.body)))
		r.ContentLength = c.announced
		w := httptestRecorder()
		got, ok := m.readBody(w, r)
		if ok != c.ok || (ok && string(got) != c.body) {
			t.Errorf("announced %d, body %q: read %q, %v", c.announced, c.body, got, ok)
		}
	}
}

func httptestRecorder() *httptest.ResponseRecorder { return httptest.NewRecorder() }
