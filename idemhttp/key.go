package idemhttp

import (
	"errors"
	"fmt"
	"strings"

	"github.com/idem-go/idem/storekit"
)

// ErrNoKey is returned by ParseKey for a request without the key header.
var ErrNoKey = errors.New("idemhttp: no idempotency key")

// ParseKey returns the key carried by the values of the key header (all the
// field lines of the request, as http.Header.Values gives them).
//
// The draft defines the field as an RFC 8941 structured-field String
// ("8e03978e-40d5-43e8-bc93-6894a57f9324", with \" and \\ escapes, printable
// ASCII only). Many clients send the bare value instead, so a value that
// does not start with a double quote is accepted as is when it is printable
// ASCII without spaces, double quotes, backslashes, commas or semicolons.
// Structured-field parameters (;a=1) are not accepted. Refused: more than
// one field line, an empty key, a key longer than MaxKeyLen bytes (once
// unquoted), and anything malformed; the error is an *storekit.KeyError
// matching idem.ErrInvalidKey, whose Reason says what is wrong. No field
// line at all is ErrNoKey.
func ParseKey(values []string) (string, error) {
	switch len(values) {
	case 0:
		return "", ErrNoKey
	case 1:
	default:
		return "", &storekit.KeyError{Reason: "more than one field line"}
	}
	v := strings.Trim(values[0], " \t")
	if v == "" {
		return "", &storekit.KeyError{Reason: "empty"}
	}
	var key string
	if v[0] == '"' {
		var b strings.Builder
		i := 1
		closed := false
		for i < len(v) && !closed {
			c := v[i]
			switch {
			case c == '\\':
				if i+1 >= len(v) || (v[i+1] != '"' && v[i+1] != '\\') {
					return "", &storekit.KeyError{Reason: "bad escape in string"}
				}
				b.WriteByte(v[i+1])
				i += 2
			case c == '"':
				closed = true
				i++
			case c < 0x20 || c > 0x7e:
				return "", &storekit.KeyError{Reason: "string holds a character that is not printable ASCII"}
			default:
				b.WriteByte(c)
				i++
			}
			if b.Len() > MaxKeyLen {
				return "", &storekit.KeyError{Reason: fmt.Sprintf("longer than %d bytes", MaxKeyLen)}
			}
		}
		if !closed {
			return "", &storekit.KeyError{Reason: "unterminated string"}
		}
		if i != len(v) {
			return "", &storekit.KeyError{Reason: "characters after the string (parameters are not accepted)"}
		}
		key = b.String()
		if key == "" {
			return "", &storekit.KeyError{Reason: "empty"}
		}
	} else {
		for i := 0; i < len(v); i++ {
			c := v[i]
			if c <= 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == ',' || c == ';' {
				return "", &storekit.KeyError{Reason: fmt.Sprintf("bare key holds %q; send it as a quoted string", c)}
			}
		}
		key = v
	}
	if len(key) > MaxKeyLen {
		return "", &storekit.KeyError{Reason: fmt.Sprintf("longer than %d bytes", MaxKeyLen)}
	}
	return key, nil
}
