package dynamostore_test

import (
	"testing"

	"github.com/idem-go/idem/stores/storetest"
)

func TestRecords(t *testing.T) {
	storetest.RunList(t, newEnv(t).store)
}
