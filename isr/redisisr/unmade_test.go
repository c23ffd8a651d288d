package redisisr_test

import (
	"reflect"
	"testing"

	"github.com/idem-go/idem/isr"
	"github.com/idem-go/idem/isr/isrtest"
	"github.com/idem-go/idem/isr/redisisr"
	"github.com/idem-go/idem/stores/storetest"
)

// Every exported method of a Table its constructor did not make returns
// an error matching idem.ErrInvalidOption (or a zero result), never
// panics.
func TestUnmadeValues(t *testing.T) {
	for name, tb := range map[string]*redisisr.Table{"nil": nil, "zero": {}} {
		t.Run("Table/"+name, func(t *testing.T) {
			storetest.CheckUnmade(t, reflect.TypeFor[*redisisr.Table](), isrtest.UnmadeCalls(t, tb),
				map[string]func() any{"Key": func() any { return tb.Key("CACHE#ab", isr.SKMeta) }})
		})
	}
}
