package idemmcp_test

import (
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/idemmcp"
	"github.com/idem-go/idem/storekit"
)

// FuzzCheckKey: CheckKey never panics; a key it accepts is 1 to MaxKeyLen
// visible ASCII bytes, and SetKey then KeyOf gives it back; one it refuses
// is an *storekit.KeyError matching idem.ErrInvalidKey.
func FuzzCheckKey(f *testing.F) {
	for _, s := range []string{"order-1", "", " ", "01J9Z3K6Q8Y4V2W7X5T1R0S9P8", "ключ", "a\x00b", "~!"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, key string) {
		err := idemmcp.CheckKey(key)
		if err != nil {
			var ke *storekit.KeyError
			if !errors.As(err, &ke) || !errors.Is(err, idem.ErrInvalidKey) {
				t.Fatalf("CheckKey(%q) = %v, want an *storekit.KeyError", key, err)
			}
			return
		}
		if len(key) == 0 || len(key) > idemmcp.MaxKeyLen {
			t.Fatalf("CheckKey accepted a key of %d bytes", len(key))
		}
		for i := 0; i < len(key); i++ {
			if key[i] < 0x21 || key[i] > 0x7e {
				t.Fatalf("CheckKey accepted %q: byte %d is not visible ASCII", key, i)
			}
		}
		got, ok := idemmcp.KeyOf(idemmcp.SetKey(&mcp.CallToolParams{Name: "t"}, key))
		if !ok || got != key {
			t.Fatalf("KeyOf(SetKey(%q)) = %q, %v", key, got, ok)
		}
	})
}
