package natsstore

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// expiresHeader carries a record's ExpiresAt (Unix milliseconds, decimal)
// on the message that holds it, so a clean-up pass decides from the
// message's headers alone, without reading the record.
const expiresHeader = "Idem-Expires-At"

// publisher writes records straight to the bucket's stream, as the KV API
// does (a publish to "$KV.<bucket>.<key>" expecting the key's last
// sequence), with the record's expiry in expiresHeader. A Store has one
// when it knows the bucket's stream and the stream is a plain bucket on
// the JetStream context's default API: subjects "$KV.<bucket>.>" and no
// mirror. Otherwise (no stream known, a domain or API prefix, a mirror)
// the Store writes with kv.Create and kv.Update, and those records carry
// no expiry header.
type publisher struct {
	js     jetstream.JetStream
	prefix string // "$KV.<bucket>."
	name   string // the stream's name

	mu     sync.Mutex
	stream jetstream.Stream // the stream's handle, looked up when first needed
}

// newPublisher returns a publisher for the bucket whose stream is info, or
// nil when the Store must write through the KV API (see publisher).
// stream may be nil: it is looked up when a write needs it.
func newPublisher(js jetstream.JetStream, stream jetstream.Stream, info *jetstream.StreamInfo) *publisher {
	if js == nil || info == nil {
		return nil
	}
	o := js.Options()
	if api := strings.TrimSuffix(o.APIPrefix, "."); o.Domain != "" || api != "" && api != strings.TrimSuffix(jetstream.DefaultAPIPrefix, ".") {
		return nil // kv.Put prepends the API prefix to the subject
	}
	c := info.Config
	bucket, ok := strings.CutPrefix(c.Name, "KV_")
	if !ok || c.Mirror != nil || len(c.Subjects) != 1 || c.Subjects[0] != "$KV."+bucket+".>" {
		return nil
	}
	return &publisher{js: js, prefix: "$KV." + bucket + ".", name: c.Name, stream: stream}
}

// learnStream gives a Store with a JetStream context (WithJetStream) its
// publisher, from a status of the bucket it has just read.
func (s *Store) learnStream(st jetstream.KeyValueStatus) {
	if s.js == nil || s.pub.Load() != nil {
		return
	}
	if p := newPublisher(s.js, nil, streamInfo(st)); p != nil {
		s.pub.CompareAndSwap(nil, p)
	}
}

// handle returns the stream's handle, looking it up once.
func (p *publisher) handle(ctx context.Context) (jetstream.Stream, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stream == nil {
		st, err := p.js.Stream(ctx, p.name)
		if err != nil {
			return nil, err
		}
		p.stream = st
	}
	return p.stream, nil
}

// publish writes value under the KV key key if the key's last message has
// sequence rev (0: none), as kv.Update does.
func (p *publisher) publish(ctx context.Context, key string, value []byte, expiresAt int64, rev uint64) (uint64, error) {
	m := &nats.Msg{Subject: p.prefix + key, Header: nats.Header{}, Data: value}
	m.Header.Set(expiresHeader, strconv.FormatInt(expiresAt, 10))
	ack, err := p.js.PublishMsg(ctx, m, jetstream.WithExpectLastSequencePerSubject(rev))
	if err != nil {
		return 0, err
	}
	return ack.Sequence, nil
}

// write is Store.write through the publisher: an Update on rev, or, when
// deleted, a Create, which (as kv.Create does) writes over a delete marker
// expecting the marker's sequence.
func (p *publisher) write(ctx context.Context, key string, value []byte, expiresAt int64, rev uint64, deleted bool) (newRev uint64, conflict bool, err error) {
	if deleted {
		rev = 0
	}
	newRev, err = p.publish(ctx, key, value, expiresAt, rev)
	switch {
	case err == nil:
		return newRev, false, nil
	case !isWrongLastSeq(err):
		return 0, false, &storekit.StoreError{Op: "write", Err: err}
	case !deleted:
		return 0, true, nil
	}
	st, err := p.handle(ctx)
	if err != nil {
		return 0, false, &storekit.StoreError{Op: "stream", Err: err}
	}
	last, err := st.GetLastMsgForSubject(ctx, p.prefix+key)
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return 0, true, nil // removed since: the caller reads again
	case err != nil:
		return 0, false, &storekit.StoreError{Op: "get", Err: err}
	case entryOp(last.Header) == jetstream.KeyValuePut:
		return 0, true, nil // written since
	}
	newRev, err = p.publish(ctx, key, value, expiresAt, last.Sequence)
	switch {
	case err == nil:
		return newRev, false, nil
	case isWrongLastSeq(err):
		return 0, true, nil
	default:
		return 0, false, &storekit.StoreError{Op: "write", Err: err}
	}
}

// entryOp is the KV operation of a bucket message, from its headers, as the
// KV API reads it: a delete marker, a purge marker, or a value.
func entryOp(h nats.Header) jetstream.KeyValueOp {
	switch h.Get("KV-Operation") {
	case "DEL":
		return jetstream.KeyValueDelete
	case "PURGE":
		return jetstream.KeyValuePurge
	case "":
		switch h.Get(jetstream.MarkerReasonHeader) {
		case "MaxAge", "Purge":
			return jetstream.KeyValuePurge
		case "Remove":
			return jetstream.KeyValueDelete
		}
	}
	return jetstream.KeyValuePut
}

// headerExpiry is the ExpiresAt a message's expiresHeader carries; ok is
// false when it has none (a record written through the KV API, or not a
// record).
func headerExpiry(h nats.Header) (ms int64, ok bool) {
	v := h.Get(expiresHeader)
	if v == "" {
		return 0, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	return ms, err == nil
}
