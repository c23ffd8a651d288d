package memstore_test

import (
	"testing"

	"github.com/idem-go/idem/stores/memstore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestRecords(t *testing.T) {
	s, err := memstore.New(memstore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunList(t, s)
}
