package filestore

import (
	"strconv"

	"github.com/idem-go/idem/storekit"
)

// MaxKeyLen is the longest storage key the store accepts, in bytes. It keeps
// the name of a temporary file (".tmp-" + key + "-" + a number) well under
// the 255-byte file name limit of common file systems.
const MaxKeyLen = 200

// ValidateKey reports whether key can name a record file: non-empty, at most
// MaxKeyLen bytes, only the characters A-Z a-z 0-9 . _ : -, and not starting
// with a dot. The error is an *storekit.KeyError matching storekit.ErrInvalidKey.
func ValidateKey(key string) error {
	switch {
	case key == "":
		return &storekit.KeyError{Reason: "empty storage key"}
	case len(key) > MaxKeyLen:
		return &storekit.KeyError{Reason: "storage key longer than " + strconv.Itoa(MaxKeyLen) + " bytes"}
	case key[0] == '.':
		return &storekit.KeyError{Reason: "storage key starts with a dot"}
	}
	for i := 0; i < len(key); i++ {
		if !keyByte(key[i]) {
			return &storekit.KeyError{Reason: "storage key has a disallowed byte " + strconv.Quote(key[i:i+1]) + " at offset " + strconv.Itoa(i)}
		}
	}
	return nil
}

func keyByte(c byte) bool {
	switch {
	case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		return true
	case c == '.', c == '_', c == ':', c == '-':
		return true
	}
	return false
}
