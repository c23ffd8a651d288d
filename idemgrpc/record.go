package idemgrpc

import (
	"errors"
	"fmt"
	"slices"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

// record is what a first call leaves for its replays.
type record struct {
	// Type is the response message's full name (code OK).
	Type string
	// Message is the response message's deterministic encoding (code OK).
	Message []byte
	// Status is the encoded google.rpc.Status of a failed call (code, message
	// and details), empty for OK.
	Status []byte
	// Header and Trailer are the metadata the handler set, in the order it
	// set them.
	Header, Trailer []pair
}

type pair struct{ k, v string }

// Field numbers of the record encoding, a protobuf wire-format message:
//
//	1 version (varint, 1)
//	2 type (bytes)      3 message (bytes)   4 status (bytes)
//	5 header entry      6 trailer entry     (bytes: 1 key, 2 value)
//
// A replay decodes it in one pass, slicing the stored bytes; a record with
// an unknown version or field is refused as corrupt, never guessed at.
const (
	fVersion = 1
	fType    = 2
	fMessage = 3
	fStatus  = 4
	fHeader  = 5
	fTrailer = 6
	fKey     = 1
	fValue   = 2

	recordVersion = 1
)

// codec is the Guard's codec: it encodes *record and nothing else.
type codec struct{}

func (codec) Marshal(v any) ([]byte, error) {
	var r *record
	switch x := v.(type) {
	case record:
		r = &x
	case *record:
		r = x
	default:
		return nil, fmt.Errorf("idemgrpc: cannot encode %T", v)
	}
	n := 2 + len(r.Type) + len(r.Message) + len(r.Status) + 8
	for _, p := range r.Header {
		n += len(p.k) + len(p.v) + 8
	}
	for _, p := range r.Trailer {
		n += len(p.k) + len(p.v) + 8
	}
	b := make([]byte, 0, n)
	b = protowire.AppendTag(b, fVersion, protowire.VarintType)
	b = protowire.AppendVarint(b, recordVersion)
	if r.Status == nil {
		b = protowire.AppendTag(b, fType, protowire.BytesType)
		b = protowire.AppendString(b, r.Type)
		b = protowire.AppendTag(b, fMessage, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Message)
	} else {
		b = protowire.AppendTag(b, fStatus, protowire.BytesType)
		b = protowire.AppendBytes(b, r.Status)
	}
	b = appendPairs(b, fHeader, r.Header)
	b = appendPairs(b, fTrailer, r.Trailer)
	return b, nil
}

func appendPairs(b []byte, num protowire.Number, ps []pair) []byte {
	for _, p := range ps {
		b = protowire.AppendTag(b, num, protowire.BytesType)
		b = protowire.AppendVarint(b, uint64(protowire.SizeTag(fKey)*2+protowire.SizeBytes(len(p.k))+protowire.SizeBytes(len(p.v))))
		b = protowire.AppendTag(b, fKey, protowire.BytesType)
		b = protowire.AppendString(b, p.k)
		b = protowire.AppendTag(b, fValue, protowire.BytesType)
		b = protowire.AppendString(b, p.v)
	}
	return b
}

var errBadRecord = errors.New("idemgrpc: malformed record")

func (codec) Unmarshal(data []byte, v any) error {
	r, ok := v.(*record)
	if !ok {
		return fmt.Errorf("idemgrpc: cannot decode into %T", v)
	}
	*r = record{}
	version := uint64(0)
	ok200 := false
	for len(data) > 0 {
		num, typ, n := protowire.ConsumeTag(data)
		if n < 0 {
			return errBadRecord
		}
		data = data[n:]
		if num == fVersion {
			if typ != protowire.VarintType {
				return errBadRecord
			}
			if version, n = protowire.ConsumeVarint(data); n < 0 {
				return errBadRecord
			}
			data = data[n:]
			if version != recordVersion {
				return fmt.Errorf("idemgrpc: record version %d is not known", version)
			}
			continue
		}
		if typ != protowire.BytesType {
			return errBadRecord
		}
		val, n := protowire.ConsumeBytes(data)
		if n < 0 {
			return errBadRecord
		}
		data = data[n:]
		switch num {
		case fType:
			r.Type = string(val)
		case fMessage:
			r.Message, ok200 = val, true
		case fStatus:
			r.Status = val
		case fHeader, fTrailer:
			p, err := consumePair(val)
			if err != nil {
				return err
			}
			if num == fHeader {
				r.Header = append(r.Header, p)
			} else {
				r.Trailer = append(r.Trailer, p)
			}
		default:
			return fmt.Errorf("idemgrpc: record field %d is not known", num)
		}
	}
	if version != recordVersion || ok200 == (r.Status != nil) || (ok200 && r.Type == "") {
		return errBadRecord
	}
	if ok200 && r.Message == nil {
		r.Message = []byte{}
	}
	return nil
}

func consumePair(b []byte) (pair, error) {
	var p pair
	var seen int
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return p, errBadRecord
		}
		b = b[n:]
		val, n := protowire.ConsumeBytes(b)
		if n < 0 {
			return p, errBadRecord
		}
		b = b[n:]
		switch num {
		case fKey:
			p.k = string(val)
			seen |= 1
		case fValue:
			p.v = string(val)
			seen |= 2
		default:
			return p, errBadRecord
		}
	}
	if seen&1 == 0 {
		return p, errBadRecord
	}
	return p, nil
}

// mdPairs appends md's values to dst, keys in sorted order, each key's
// values in their order.
func mdPairs(dst []pair, md metadata.MD) []pair {
	keys := make([]string, 0, len(md))
	for k := range md {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		for _, v := range md[k] {
			dst = append(dst, pair{k, v})
		}
	}
	return dst
}
