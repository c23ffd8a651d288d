package idemhttp

import (
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/http"
)

// The recorded response is stored in a binary format:
//
//	byte     recordFormat (2)
//	uvarint  status
//	byte     flags (flagOmitted)
//	uvarint  number of header names
//	  uvarint length, name
//	  uvarint number of values
//	    uvarint length, value
//	bytes    the body, as sent
//	uint64   the body's length, big-endian
//	uint32   CRC-32C (Castagnoli) of everything before it, big-endian
//
// The body's length and the checksum make a damaged record (bytes lost,
// added or changed) an error, never another response. Anything else is
// errBadRecord.
const (
	recordFormat = 2
	flagOmitted  = 1
	// trailerLen is the size of the body length and checksum that end a
	// record.
	trailerLen = 8 + 4
)

// castagnoli is the CRC-32C table of the record checksum.
var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// seal appends the record trailer to b, a record up to the end of its
// body, whose body is bodyLen bytes long.
func seal(b []byte, bodyLen int) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(bodyLen))
	return binary.BigEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// recordCodec is the idem.Codec of the middleware's Guard: it encodes a
// response in the format above and decodes it.
type recordCodec struct{}

// errBadRecord is the cause of a recorded response that does not decode.
var errBadRecord = errors.New("idemhttp: malformed recorded response")

func (recordCodec) Marshal(v any) ([]byte, error) {
	r, ok := v.(response)
	if !ok {
		return nil, fmt.Errorf("idemhttp: cannot encode %T", v)
	}
	if r.raw != nil {
		return r.raw, nil
	}
	return r.appendTo(nil), nil
}

func (recordCodec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*response)
	if !ok {
		return fmt.Errorf("idemhttp: cannot decode into %T", v)
	}
	return r.decode(data)
}

// appendTo appends r in the record format.
func (r *response) appendTo(b []byte) []byte {
	n := 1 + 2*binary.MaxVarintLen64 + 1 + len(r.Body) + trailerLen
	for k, vs := range r.Header {
		n += 2*binary.MaxVarintLen64 + len(k)
		for _, v := range vs {
			n += binary.MaxVarintLen64 + len(v)
		}
	}
	if b == nil {
		b = make([]byte, 0, n)
	}
	b = append(b, recordFormat)
	b = binary.AppendUvarint(b, uint64(r.Status))
	var flags byte
	if r.Omitted {
		flags |= flagOmitted
	}
	b = append(b, flags)
	b = binary.AppendUvarint(b, uint64(len(r.Header)))
	for k, vs := range r.Header {
		b = appendHeader(b, k, vs)
	}
	return seal(append(b, r.Body...), len(r.Body))
}

// appendHeader appends one header name and its values in the current
// format.
func appendHeader(b []byte, k string, vs []string) []byte {
	b = binary.AppendUvarint(b, uint64(len(k)))
	b = append(b, k...)
	b = binary.AppendUvarint(b, uint64(len(vs)))
	for _, v := range vs {
		b = binary.AppendUvarint(b, uint64(len(v)))
		b = append(b, v...)
	}
	return b
}

// decode sets r from a recorded response. The headers of
// the record are checked here and materialized by header, at
// replay; the body aliases data, which is only read.
func (r *response) decode(data []byte) error {
	*r = response{}
	if len(data) == 0 || data[0] != recordFormat {
		return fmt.Errorf("%w: unknown format", errBadRecord)
	}
	if len(data) < 1+trailerLen {
		return fmt.Errorf("%w: truncated", errBadRecord)
	}
	sum := binary.BigEndian.Uint32(data[len(data)-4:])
	data = data[:len(data)-4]
	if crc32.Checksum(data, castagnoli) != sum {
		return fmt.Errorf("%w: checksum mismatch", errBadRecord)
	}
	bodyLen := binary.BigEndian.Uint64(data[len(data)-8:])
	data = data[:len(data)-8]
	p := data[1:]
	status, ok := uvarint(&p)
	if !ok || status > 999 {
		return fmt.Errorf("%w: bad status", errBadRecord)
	}
	r.Status = int(status)
	if err := checkStatus(r.Status); err != nil {
		return err
	}
	if len(p) == 0 || p[0]&^flagOmitted != 0 {
		return fmt.Errorf("%w: bad flags", errBadRecord)
	}
	r.Omitted = p[0]&flagOmitted != 0
	p = p[1:]
	start := len(data) - len(p)
	names, ok := uvarint(&p)
	if !ok || names > uint64(len(p))/2 { // a name takes at least two bytes
		return fmt.Errorf("%w: bad header count", errBadRecord)
	}
	values := 0
	for i := uint64(0); i < names; i++ {
		if _, ok := field(&p); !ok {
			return fmt.Errorf("%w: bad header name", errBadRecord)
		}
		n, ok := uvarint(&p)
		if !ok || n > uint64(len(p)) { // a value takes at least one byte
			return fmt.Errorf("%w: bad value count", errBadRecord)
		}
		for j := uint64(0); j < n; j++ {
			if _, ok := field(&p); !ok {
				return fmt.Errorf("%w: bad header value", errBadRecord)
			}
		}
		values += int(n)
	}
	if names > 0 {
		r.wire = data[start : len(data)-len(p)]
		r.wireValues = values
	}
	if uint64(len(p)) != bodyLen {
		return fmt.Errorf("%w: body of %d bytes, record says %d", errBadRecord, len(p), bodyLen)
	}
	if len(p) > 0 {
		r.Body = p
	}
	return nil
}

// checkStatus refuses a status net/http would panic on.
func checkStatus(status int) error {
	if status < 100 || status > 999 {
		return fmt.Errorf("%w: status %d", errBadRecord, status)
	}
	return nil
}

func uvarint(p *[]byte) (uint64, bool) {
	v, n := binary.Uvarint(*p)
	if n <= 0 {
		return 0, false
	}
	*p = (*p)[n:]
	return v, true
}

func field(p *[]byte) ([]byte, bool) {
	n, ok := uvarint(p)
	if !ok || n > uint64(len(*p)) {
		return nil, false
	}
	f := (*p)[:n]
	*p = (*p)[n:]
	return f, true
}

// setHeaders sets the recorded headers on h: one string holds all names
// and values, one slice all values.
func (r *response) setHeaders(h http.Header) {
	if r.wire == nil {
		for k, vs := range r.Header {
			h[k] = append([]string(nil), vs...)
		}
		return
	}
	s := string(r.wire) // checked by decode
	vals := make([]string, 0, r.wireValues)
	pos := 0
	next := func() int {
		var v uint64
		for shift := uint(0); pos < len(s); shift += 7 {
			c := s[pos]
			pos++
			v |= uint64(c&0x7f) << shift
			if c < 0x80 {
				break
			}
		}
		return int(v)
	}
	names := next()
	for i := 0; i < names; i++ {
		l := next()
		name := s[pos : pos+l]
		pos += l
		n := next()
		first := len(vals)
		for j := 0; j < n; j++ {
			l := next()
			vals = append(vals, s[pos:pos+l])
			pos += l
		}
		if n == 0 {
			h[name] = nil
		} else {
			h[name] = vals[first:len(vals):len(vals)]
		}
	}
}
