package idem

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"hash"
	"strings"
	"sync"
	"unicode/utf8"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/jcs"
)

// maxKeyLen bounds the caller's key, in bytes.
const maxKeyLen = 4096

// Key returns a canonical key for a call to name with args: the name, a
// colon, and the hex SHA-256 of the args as canonical JSON, the same in
// every run and process. An empty name, a value JSON cannot encode or a
// string that is not valid UTF-8 is an error matching ErrInvalidKey.
func Key(name string, args ...any) (string, error) {
	if name == "" {
		return "", &storekit.KeyError{Reason: "empty name"}
	}
	if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return "", &storekit.KeyError{Reason: "name is not valid UTF-8 text"}
	}
	if args == nil {
		args = []any{}
	}
	b, err := jcs.Marshal(args)
	if err != nil {
		return "", &storekit.KeyError{Reason: "arguments cannot be encoded", Err: err}
	}
	sum := sha256.Sum256(b)
	return name + ":" + hex.EncodeToString(sum[:]), nil
}

// keyer derives storage keys and payload hashes for one Guard.
type keyer struct {
	tenant, scope string
	secret        []byte
	macs          *sync.Pool // of hash.Hash (HMAC-SHA256 under secret), nil without a secret
}

func newKeyer(tenant, scope string, secret []byte) keyer {
	k := keyer{tenant: tenant, scope: scope, secret: secret}
	if len(secret) > 0 {
		k.macs = &sync.Pool{New: func() any { return &macState{h: hmac.New(sha256.New, secret)} }}
	}
	return k
}

// appendField appends a length-prefixed field, so that no two (tenant,
// scope, key) triples share an encoding.
func appendField(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint64(b, uint64(len(s)))
	return append(b, s...)
}

// macState is a pooled HMAC and the buffers it reads from and writes to.
type macState struct {
	h       hash.Hash
	in, out []byte
}

// mac returns the HMAC-SHA256 of b under the secret. b is copied into the
// pooled buffer before it goes through the hash.Hash interface, so that it
// does not escape: callers keep their key bytes on the stack.
func (k keyer) mac(b []byte) (d [sha256.Size]byte) {
	m := k.macs.Get().(*macState)
	m.in = append(m.in[:0], b...)
	m.h.Reset()
	m.h.Write(m.in)
	m.out = m.h.Sum(m.out[:0])
	copy(d[:], m.out)
	k.macs.Put(m)
	return d
}

// sum returns the hex digest of b: SHA-256, or HMAC-SHA256 under the secret.
func (k keyer) sum(prefix string, b []byte) string {
	var digest [sha256.Size]byte
	if k.macs == nil {
		digest = sha256.Sum256(b)
	} else {
		digest = k.mac(b)
	}
	var hexed [2 * sha256.Size]byte
	hex.Encode(hexed[:], digest[:])
	var out strings.Builder // one allocation: the string itself
	out.Grow(len(prefix) + len(hexed))
	out.WriteString(prefix)
	out.Write(hexed[:])
	return out.String()
}

func (k keyer) storageKey(key string) (string, error) {
	switch {
	case key == "":
		return "", &storekit.KeyError{Reason: "empty key"}
	case len(key) > maxKeyLen:
		return "", &storekit.KeyError{Reason: "key longer than 4096 bytes"}
	}
	var buf [256]byte
	b := appendField(buf[:0], "idem/key/v1")
	b = appendField(b, k.tenant)
	b = appendField(b, k.scope)
	b = appendField(b, key)
	return k.sum(storekit.StorageKeyPrefix, b), nil
}

func (k keyer) payloadHash(v any) (string, error) {
	if s, ok := v.(string); ok && plainASCII(s) {
		// The canonical JSON of a string of printable ASCII other than
		// '"' and '\\' is the string in double quotes (nothing to escape):
		// no encoder needed for the common payload of a hash or an id.
		var buf [256]byte
		b := appendField(buf[:0], "idem/payload/v1")
		b = append(b, '"')
		b = append(b, s...)
		b = append(b, '"')
		return k.sum("", b), nil
	}
	c, err := jcs.Marshal(v)
	if err != nil {
		return "", &storekit.KeyError{Reason: "payload cannot be encoded", Err: err, Payload: true}
	}
	b := appendField(make([]byte, 0, 32+len(c)), "idem/payload/v1")
	return k.sum("", append(b, c...)), nil
}

// plainASCII reports whether s is printable ASCII without '"' or '\\'.
func plainASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < 0x20 || c > 0x7e || c == '"' || c == '\\' {
			return false
		}
	}
	return true
}
