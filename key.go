package idem

import (
	"bytes"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"hash"
	"strings"
	"unicode/utf8"
)

// StorageKeyPrefix starts every storage key a Guard makes. The rest is the
// hex SHA-256 (or HMAC-SHA256) of the tenant, scope and key.
const StorageKeyPrefix = "idem:"

// MaxKeyLen bounds the caller's key, in bytes.
const MaxKeyLen = 4096

// Key returns a canonical key for a call to name with args: the name, a
// colon, and the hex SHA-256 of the args as canonical JSON (object keys
// sorted at every depth, structs and maps with the same fields alike). The
// same name and args give the same key in every run and process. A value
// JSON cannot encode (func, chan, a cycle, NaN) gives an error matching
// ErrInvalidKey, as does an empty name.
func Key(name string, args ...any) (string, error) {
	if name == "" {
		return "", &KeyError{Reason: "empty name"}
	}
	if !utf8.ValidString(name) || strings.ContainsRune(name, 0) {
		return "", &KeyError{Reason: "name is not valid UTF-8 text"}
	}
	if args == nil {
		args = []any{}
	}
	b, err := CanonicalJSON(args)
	if err != nil {
		return "", &KeyError{Reason: "arguments cannot be encoded", Err: err}
	}
	sum := sha256.Sum256(b)
	return name + ":" + hex.EncodeToString(sum[:]), nil
}

// CanonicalJSON encodes v as JSON with object keys sorted at every depth and
// numbers kept exactly as encoded, so equal values give equal bytes whatever
// their Go types (a struct and a map with the same fields agree).
func CanonicalJSON(v any) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, err
	}
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	var tree any
	if err := dec.Decode(&tree); err != nil {
		return nil, err
	}
	return json.Marshal(tree) // maps encode with sorted keys
}

// keyer derives storage keys and payload hashes for one Guard.
type keyer struct {
	tenant, scope string
	secret        []byte
}

func (k keyer) newHash() hash.Hash {
	if len(k.secret) > 0 {
		return hmac.New(sha256.New, k.secret)
	}
	return sha256.New()
}

// writeField writes a length-prefixed field so that no two (tenant, scope,
// key) triples share an encoding.
func writeField(h hash.Hash, s string) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(s)))
	h.Write(n[:])
	h.Write([]byte(s))
}

func (k keyer) storageKey(key string) (string, error) {
	switch {
	case key == "":
		return "", &KeyError{Reason: "empty key"}
	case len(key) > MaxKeyLen:
		return "", &KeyError{Reason: "key longer than 4096 bytes"}
	}
	h := k.newHash()
	writeField(h, "idem/key/v1")
	writeField(h, k.tenant)
	writeField(h, k.scope)
	writeField(h, key)
	return StorageKeyPrefix + hex.EncodeToString(h.Sum(nil)), nil
}

func (k keyer) payloadHash(v any) (string, error) {
	b, err := CanonicalJSON(v)
	if err != nil {
		return "", &KeyError{Reason: "payload cannot be encoded", Err: err, Payload: true}
	}
	h := k.newHash()
	writeField(h, "idem/payload/v1")
	h.Write(b)
	return hex.EncodeToString(h.Sum(nil)), nil
}
