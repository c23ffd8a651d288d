package idemmcp

import (
	"crypto/rand"
	"fmt"

	"github.com/idem-go/idem/storekit"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The _meta names this package reads and writes. They follow the MCP
// naming rule for _meta keys: a reverse-DNS prefix that names the
// package's home, a slash, and a name.
const (
	// MetaKey is the _meta entry of a tools/call request that carries the
	// idempotency key, a JSON string:
	//
	//	{"method": "tools/call", "params": {"name": "send_email",
	//	  "arguments": {...},
	//	  "_meta": {"io.github.idem-go/idempotency-key": "01J9Z3..."}}}
	MetaKey = "io.github.idem-go/idempotency-key"
	// MetaReplayed is set to true in the _meta of every result that is a
	// replay of a recorded one (the tool did not run for it).
	MetaReplayed = "io.github.idem-go/replayed"
	// MetaRefused names, in the _meta of a tool error the middleware
	// returned itself (the tool did not run), why the call was refused:
	// one of the Refused* values. Refusal reads it.
	MetaRefused = "io.github.idem-go/refused"

	// MaxKeyLen is the longest key accepted, in bytes.
	MaxKeyLen = 255
)

// The reasons a call is refused, as MetaRefused carries them. The tool did
// not run for any of them.
const (
	// RefusedInProgress: a call with the key is running; retry later with
	// the same key to get its result.
	RefusedInProgress = "in_progress"
	// RefusedPayloadMismatch: the key was used with another tool or other
	// arguments. The call is a new one and needs a new key.
	RefusedPayloadMismatch = "payload_mismatch"
	// RefusedKeyRequired: the tool needs a key and the call has none
	// (WithRequired).
	RefusedKeyRequired = "key_required"
	// RefusedInvalidKey: the key is not a string of 1 to MaxKeyLen visible
	// ASCII characters, or the call carries two different keys.
	RefusedInvalidKey = "invalid_key"
	// RefusedInvalidArguments: the arguments are not a JSON value with a
	// canonical form, so they cannot be compared with a later call's.
	RefusedInvalidArguments = "invalid_arguments"
	// RefusedUnauthenticated: the WithScope function found no caller to
	// scope the key by.
	RefusedUnauthenticated = "unauthenticated"
	// RefusedDuplicate: the key was used and the duplicate policy is
	// idem.Raise, or the first call's result was not kept.
	RefusedDuplicate = "duplicate"
	// RefusedUnavailable: the idempotency store failed; retry.
	RefusedUnavailable = "unavailable"
	// RefusedInternal: the record of the key cannot be read.
	RefusedInternal = "internal"
)

// Refusal returns why the middleware refused the call that res answers
// (one of the Refused* values), or "" when res is the tool's own result
// or a replay of one.
func Refusal(res *mcp.CallToolResult) string {
	if res == nil || !res.IsError {
		return ""
	}
	s, _ := res.Meta[MetaRefused].(string)
	return s
}

// Replayed reports whether res is a replay of a recorded result: the tool
// did not run for the call that got it.
func Replayed(res *mcp.CallToolResult) bool {
	if res == nil {
		return false
	}
	b, _ := res.Meta[MetaReplayed].(bool)
	return b
}

// CheckKey reports whether key is a valid idempotency key: 1 to MaxKeyLen
// bytes, each a visible ASCII character ('!' to '~'). A UUID, a ULID, an
// order number are all fine. A refused key is an *storekit.KeyError matching
// idem.ErrInvalidKey.
func CheckKey(key string) error {
	if key == "" {
		return &storekit.KeyError{Reason: "empty"}
	}
	if len(key) > MaxKeyLen {
		return &storekit.KeyError{Reason: fmt.Sprintf("longer than %d bytes", MaxKeyLen)}
	}
	for i := 0; i < len(key); i++ {
		if c := key[i]; c < 0x21 || c > 0x7e {
			return &storekit.KeyError{Reason: fmt.Sprintf("byte %d is %q, not a visible ASCII character", i, c)}
		}
	}
	return nil
}

// NewKey returns a fresh random key: 26 characters of base32 holding 128
// random bits, from crypto/rand.
func NewKey() string { return rand.Text() }

// SetKey returns a copy of params whose _meta carries key under MetaKey.
// params itself, and its _meta map, are left as they are.
func SetKey(params *mcp.CallToolParams, key string) *mcp.CallToolParams {
	var p mcp.CallToolParams
	if params != nil {
		p = *params
	}
	meta := make(mcp.Meta, len(p.Meta)+1)
	for k, v := range p.Meta {
		meta[k] = v
	}
	meta[MetaKey] = key
	p.Meta = meta
	return &p
}

// KeyOf returns the key in params' _meta, if it has one that is a string.
func KeyOf(params *mcp.CallToolParams) (string, bool) {
	if params == nil {
		return "", false
	}
	k, ok := params.Meta[MetaKey].(string)
	return k, ok
}
