package filestore_test

import (
	"testing"

	"github.com/idem-go/idem/stores/filestore"
	"github.com/idem-go/idem/stores/storetest"
)

func TestRecords(t *testing.T) {
	s, err := filestore.New(t.TempDir(), filestore.WithoutCleanup())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	storetest.RunList(t, s)
}
