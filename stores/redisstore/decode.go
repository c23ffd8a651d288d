package redisstore

import (
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/idem-go/idem/storekit"
)

// The record encoding: one string value per key, a fixed-width ASCII
// header that the scripts check with string.sub and one anchored pattern,
// then the variable parts. See lua/common.lua for the offsets. A completed
// or failed record expires natively at its expires_at exactly, so one that
// is present is live. The flags byte is a hex digit (+8: a waiter watches
// the key, so a completion publishes). A claim's owner (Record.Owner), when
// it has one, follows the six parts: its length in five digits, then the
// owner; a record without one (every record written before owners were
// recorded, and every completed or failed record) ends with the sixth part.
const (
	magic     = "R3" // 'R' and the encoding version
	headerLen = 122

	offStatus    = 2
	offFlags     = 3
	offExpires   = 4
	offHeartbeat = 17
	offStarted   = 30
	offCompleted = 43
	offAttempt   = 56
	offTakeover  = 69
	offNonceLen  = 82
	offHashLen   = 87
	offKeyLen    = 92
	offResultLen = 97
	offMsgLen    = 107
	offTypeLen   = 117

	numWidth   = 13 // times, attempt, takeover
	smallWidth = 5  // nonce, payload hash, key, error type lengths
	bigWidth   = 10 // result and error message lengths

	flagResult   = 1
	flagError    = 2
	flagRelative = 4 // a fresh claim's times, relative to the key's expiry
	flagWatched  = 8 // a waiter watches the key

	maxSmall = 99999
	maxBig   = 9999999999
	maxNum   = 9999999999999
)

var statusChar = map[storekit.Status]byte{
	storekit.StatusInProgress: 'P',
	storekit.StatusCompleted:  'C',
	storekit.StatusFailed:     'F',
}

func charStatus(c byte) (storekit.Status, bool) {
	switch c {
	case 'P':
		return storekit.StatusInProgress, true
	case 'C':
		return storekit.StatusCompleted, true
	case 'F':
		return storekit.StatusFailed, true
	}
	return "", false
}

// pad appends n as zero-padded decimal of width w; n must fit.
func pad(b []byte, n int64, w int) []byte {
	var tmp [20]byte
	s := strconv.AppendInt(tmp[:0], n, 10)
	for i := len(s); i < w; i++ {
		b = append(b, '0')
	}
	return append(b, s...)
}

// digits parses s, which must be ASCII digits only.
func digits(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int64(c-'0')
	}
	return n, true
}

// encode returns the value of r in the record encoding. The stores' scripts
// write records themselves; encode serves tests and tools.
func encode(r *storekit.Record) (string, error) {
	if err := storekit.CheckRecord(r); err != nil {
		return "", err
	}
	var flags byte
	if r.Result != nil {
		flags |= flagResult
	}
	var msg, typ string
	if r.Error != nil {
		flags |= flagError
		msg, typ = r.Error.Message, r.Error.Type
	}
	for _, n := range []int64{r.ExpiresAt, r.HeartbeatAt, r.StartedAt, r.CompletedAt, r.Attempt, r.TakeoverMs} {
		if n < 0 || n > maxNum {
			return "", fmt.Errorf("number %d out of range", n)
		}
	}
	if len(r.Nonce) > maxSmall || len(r.PayloadHash) > maxSmall || len(r.Key) > maxSmall ||
		len(typ) > maxSmall || int64(len(r.Result)) > maxBig || int64(len(msg)) > maxBig || len(r.Owner) > maxSmall {
		return "", errors.New("field too long")
	}
	b := make([]byte, 0, headerLen+len(r.Nonce)+len(r.PayloadHash)+len(r.Key)+len(r.Result)+len(msg)+len(typ)+ownerLen(r.Owner))
	b = append(b, magic...)
	b = append(b, statusChar[r.Status], hexDigit(flags))
	for _, n := range []int64{r.ExpiresAt, r.HeartbeatAt, r.StartedAt, r.CompletedAt, r.Attempt, r.TakeoverMs} {
		b = pad(b, n, numWidth)
	}
	b = pad(b, int64(len(r.Nonce)), smallWidth)
	b = pad(b, int64(len(r.PayloadHash)), smallWidth)
	b = pad(b, int64(len(r.Key)), smallWidth)
	b = pad(b, int64(len(r.Result)), bigWidth)
	b = pad(b, int64(len(msg)), bigWidth)
	b = pad(b, int64(len(typ)), smallWidth)
	b = append(b, r.Nonce...)
	b = append(b, r.PayloadHash...)
	b = append(b, r.Key...)
	b = append(b, r.Result...)
	b = append(b, msg...)
	b = append(b, typ...)
	return string(appendOwner(b, r.Owner)), nil
}

// ownerLen is how many bytes owner takes at the end of a record.
func ownerLen(owner string) int {
	if owner == "" {
		return 0
	}
	return smallWidth + len(owner)
}

// appendOwner appends owner, when there is one, as a record ends with it:
// its length in five digits, then the owner.
func appendOwner(b []byte, owner string) []byte {
	if owner == "" {
		return b
	}
	b = pad(b, int64(len(owner)), smallWidth)
	return append(b, owner...)
}

// decode turns a stored value into a Record. Anything that is not a valid
// record for key is an *storekit.CorruptRecordError. It applies the
// same rules as get() and check() in lua/common.lua, plus the key and
// Record.Validate. pexpire is the key's absolute expiry (PEXPIRETIME, read
// with the value), which a fresh claim's relative times are counted from;
// a value with relative times and no expiry (pexpire < 0) is corrupt.
func decode(key, v string, pexpire int64) (*storekit.Record, error) {
	corrupt := func(format string, args ...any) error {
		return &storekit.CorruptRecordError{Key: key, Err: fmt.Errorf(format, args...)}
	}
	h, err := decodeHeader(v, corrupt)
	if err != nil {
		return nil, err
	}
	var parts [6]string
	at := int64(headerLen)
	for i, n := range h.lens {
		parts[i] = v[at : at+n]
		at += n
	}
	if parts[2] != key {
		return nil, corrupt("record holds key %q", parts[2])
	}
	owner, ok := ownerAt(v, at)
	if !ok {
		return nil, corrupt("malformed owner")
	}
	nums := h.nums
	if h.flags&flagRelative != 0 {
		// A claim written by SET NX: expires_at holds the lease and
		// completed_at the retention; the key expires at expiry + retention.
		if h.status != storekit.StatusInProgress || nums[1] != 0 || nums[2] != 0 || pexpire < 0 {
			return nil, corrupt("relative times on a record that is not a fresh claim")
		}
		exp := pexpire - nums[3]
		nums[0], nums[1], nums[2], nums[3] = exp, exp-nums[0], exp-nums[0], 0
	}
	r := &storekit.Record{
		Key: parts[2], Status: h.status, PayloadHash: parts[1], Nonce: parts[0],
		ExpiresAt: nums[0], HeartbeatAt: nums[1], StartedAt: nums[2], CompletedAt: nums[3],
		Attempt: nums[4], TakeoverMs: nums[5], Owner: owner,
	}
	if h.flags&flagResult != 0 {
		r.Result = []byte(parts[3])
	}
	if h.flags&flagError != 0 {
		r.Error = &storekit.RecordedFailure{Message: parts[4], Type: parts[5]}
	}
	if err := storekit.CheckRecord(r); err != nil {
		return nil, &storekit.CorruptRecordError{Key: key, Err: err}
	}
	if r.Attempt >= maxNum {
		// The largest attempt the field holds: no claim can follow it (as
		// storekit.CheckRecord says of math.MaxInt64), and check() in
		// lua/common.lua refuses it too.
		return nil, corrupt("attempt %d is the largest: no claim can follow it", r.Attempt)
	}
	return r, nil
}

// header is a record's fixed-width header, decoded: the status, the flags,
// the six numbers (expires_at, heartbeat_at, started_at, completed_at,
// attempt, takeover ms) and the six lengths (nonce, payload hash, key,
// result, error message, error type).
type header struct {
	status storekit.Status
	flags  byte
	nums   [6]int64
	lens   [6]int64
}

// decodeHeader decodes v's header and checks it against v: the version,
// each field's digits, the lengths adding up to len(v) and agreeing with
// the flags. A failure is made by corrupt.
func decodeHeader(v string, corrupt func(string, ...any) error) (header, error) {
	var h header
	if len(v) < 2 || v[:2] != magic {
		return h, corrupt("unsupported record encoding")
	}
	if len(v) < headerLen {
		return h, corrupt("record of %d bytes is shorter than its header", len(v))
	}
	var ok bool
	if h.status, ok = charStatus(v[offStatus]); !ok {
		return h, corrupt("unknown status %q", v[offStatus])
	}
	if h.flags, ok = flagsOf(v); !ok {
		return h, corrupt("bad flags %q", v[offFlags])
	}
	fields := [12][2]int{
		{offExpires, numWidth}, {offHeartbeat, numWidth}, {offStarted, numWidth},
		{offCompleted, numWidth}, {offAttempt, numWidth}, {offTakeover, numWidth},
		{offNonceLen, smallWidth}, {offHashLen, smallWidth}, {offKeyLen, smallWidth},
		{offResultLen, bigWidth}, {offMsgLen, bigWidth}, {offTypeLen, smallWidth},
	}
	total := int64(headerLen)
	for i, fw := range fields {
		n, ok := digits(v[fw[0] : fw[0]+fw[1]])
		if !ok {
			return h, corrupt("malformed header field at offset %d", fw[0])
		}
		if i < 6 {
			h.nums[i] = n
		} else {
			h.lens[i-6] = n
			total += n
		}
	}
	if total > int64(len(v)) {
		return h, corrupt("record of %d bytes, header says %d", len(v), total)
	}
	if h.flags&flagResult == 0 && h.lens[3] > 0 || h.flags&flagError == 0 && (h.lens[4] > 0 || h.lens[5] > 0) {
		return h, corrupt("lengths contradict flags")
	}
	return h, nil
}

// ownerAt returns the owner a record ends with from at, where its six
// parts end: "" when they end the record; ok is false when what follows
// them is not five digits of a length that is not 0 and that many bytes.
// Checked with the same rules by check() in lua/common.lua.
func ownerAt(v string, at int64) (owner string, ok bool) {
	rest := v[at:]
	if rest == "" {
		return "", true
	}
	if len(rest) <= smallWidth {
		return "", false
	}
	n, ok := digits(rest[:smallWidth])
	if !ok || n != int64(len(rest)-smallWidth) {
		return "", false
	}
	return rest[smallWidth:], true
}

// claimTail is the part of a new claim's value from the takeover threshold
// on: takeover ms, the six lengths, nonce, payload hash, key and owner. The claim
// script puts the status, times and attempt in front of it.
func claimTail(req storekit.ClaimRequest) (string, error) {
	if err := checkClaim(req); err != nil {
		return "", err
	}
	return string(appendTail(make([]byte, 0, headerLen-offTakeover+len(req.Nonce)+len(req.PayloadHash)+len(req.Key)+ownerLen(req.Owner)), req)), nil
}

func checkClaim(req storekit.ClaimRequest) error {
	tk := req.TakeoverAfter.Milliseconds()
	if tk < 0 || tk > maxNum {
		return fmt.Errorf("takeover threshold %v out of range", req.TakeoverAfter)
	}
	if len(req.Nonce) > maxSmall || len(req.PayloadHash) > maxSmall || len(req.Key) > maxSmall || len(req.Owner) > maxSmall {
		return errors.New("nonce, payload hash, key or owner longer than 99999 bytes")
	}
	return nil
}

func appendTail(b []byte, req storekit.ClaimRequest) []byte {
	b = pad(b, req.TakeoverAfter.Milliseconds(), numWidth)
	b = pad(b, int64(len(req.Nonce)), smallWidth)
	b = pad(b, int64(len(req.PayloadHash)), smallWidth)
	b = pad(b, int64(len(req.Key)), smallWidth)
	b = append(b, "0000000000000000000000000"...)
	b = append(b, req.Nonce...)
	b = append(b, req.PayloadHash...)
	b = append(b, req.Key...)
	return appendOwner(b, req.Owner)
}

// claimValue is a fresh claim written with SET NX PX (lease + retention):
// status in progress, attempt 1, and times relative to the key's expiry,
// which the server sets from its own clock.
func claimValue(req storekit.ClaimRequest, retention time.Duration) (string, error) {
	b, err := claimBytes(req, retention)
	return string(b), err
}

// claimBytes is claimValue as bytes (the claim sends them as they are: a
// replay, which does not keep the value, converts nothing).
func claimBytes(req storekit.ClaimRequest, retention time.Duration) ([]byte, error) {
	if err := checkClaim(req); err != nil {
		return nil, err
	}
	if l, r := req.LeaseTTL.Milliseconds(), retention.Milliseconds(); l > maxNum || r > maxNum {
		return nil, fmt.Errorf("lease %v or retention %v out of range", req.LeaseTTL, retention)
	}
	b := make([]byte, 0, headerLen+len(req.Nonce)+len(req.PayloadHash)+len(req.Key)+ownerLen(req.Owner))
	b = append(b, magic...)
	b = append(b, 'P', hexDigit(flagRelative))
	b = pad(b, req.LeaseTTL.Milliseconds(), numWidth)
	b = append(b, "00000000000000000000000000"...) // heartbeat_at, started_at
	b = pad(b, retention.Milliseconds(), numWidth)
	b = pad(b, 1, numWidth)
	return appendTail(b, req), nil
}

// sfTable holds the status-and-flags argument of the complete script for
// each completed and failed outcome (flags 0-3), so building one allocates
// nothing.
const sfTable = "C0C1C2C3F0F1F2F3"

// outcome returns the status-and-flags, lengths and body arguments of the
// complete script.
func outcome(c storekit.Completion) (sf, lens, body string, err error) {
	var flags byte
	var msg, typ string
	if c.Result != nil {
		flags |= flagResult
	}
	if c.Error != nil {
		flags |= flagError
		msg, typ = c.Error.Message, c.Error.Type
	}
	if int64(len(c.Result)) > maxBig || int64(len(msg)) > maxBig || len(typ) > maxSmall {
		return "", "", "", errors.New("result or error too long for the record encoding")
	}
	base := 0 // sfTable: completed, then failed
	if c.Status == storekit.StatusFailed {
		base = 8
	}
	sf = sfTable[base+2*int(flags) : base+2*int(flags)+2]
	var l [2*bigWidth + smallWidth]byte
	b := pad(l[:0], int64(len(c.Result)), bigWidth)
	b = pad(b, int64(len(msg)), bigWidth)
	b = pad(b, int64(len(typ)), smallWidth)
	return sf, string(b), string(c.Result) + msg + typ, nil
}

// hexDigit is the flags byte for flags 0-15.
func hexDigit(f byte) byte { return "0123456789abcdef"[f&15] }

// flagsOf reads the flags byte, a hex digit, of a value at least
// offFlags+1 long.
func flagsOf(v string) (byte, bool) {
	c := v[offFlags]
	switch {
	case c >= '0' && c <= '9':
		return c - '0', true
	case c >= 'a' && c <= 'f':
		return c - 'a' + 10, true
	}
	return 0, false
}
