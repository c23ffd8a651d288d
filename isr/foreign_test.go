package isr_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/idem-go/idem/isr/internal/isrtesting"
)

func fileRaw(t *testing.T) isrtesting.RawTable {
	tb := newFileTable(t, t.TempDir())
	return isrtesting.RawTable{
		Table:        tb,
		PointerGuard: true,
		Put: func(t *testing.T, pk, sk string, item map[string]any) {
			j := map[string]any{}
			for k, v := range item {
				if n, ok := v.(isrtesting.RawN); ok && jsonNumber.MatchString(string(n)) {
					j[k] = json.Number(n)
				} else if ok {
					j[k] = string(n) // JSON has no such number: another type
				} else {
					j[k] = v
				}
			}
			b, err := json.Marshal(j)
			if err != nil {
				t.Fatal(err)
			}
			p := tb.Path(pk, sk)
			if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(p, b, 0o600); err != nil {
				t.Fatal(err)
			}
		},
		Raw: func(t *testing.T, pk, sk string) map[string]any {
			b, err := os.ReadFile(tb.Path(pk, sk))
			if err != nil {
				t.Fatal(err)
			}
			d := json.NewDecoder(bytes.NewReader(b))
			d.UseNumber()
			var j map[string]any
			if err := d.Decode(&j); err != nil {
				t.Fatal(err)
			}
			for k, v := range j {
				if n, ok := v.(json.Number); ok {
					j[k] = isrtesting.RawN(n)
				}
			}
			return j
		},
	}
}

// jsonNumber is JSON's number syntax.
var jsonNumber = regexp.MustCompile(`^-?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?$`)

func TestFileForeignItems(t *testing.T) { isrtesting.RunForeignItems(t, fileRaw(t)) }
