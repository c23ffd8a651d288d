package integration

import (
	"context"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
)

// openNATS opens a natsstore on a bucket of its own, made by
// CreateBucket on the test NATS server: the Store publishes its records
// with their expiry in a header, and its clean-up (retention 0) reads
// headers only and deletes by stream sequence.
func openNATS(t testing.TB) storekit.Store {
	t.Helper()
	s, err := natsstore.New(natsBucket(t), natsstore.WithRetention(0))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = s.Close() }) // before the bucket is deleted
	return s
}

// natsBucket makes a bucket of its own on the test NATS server, deleted
// when the test ends.
func natsBucket(t testing.TB) jetstream.KeyValue {
	t.Helper()
	nc, err := nats.Connect(testenv.Lookup(t, "IDEM_NATS_URL", "nats"))
	if err != nil {
		testenv.Missing(t, "nats connect: "+err.Error())
	}
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := "lin" + randHex(6)
	kv, err := natsstore.CreateBucket(ctxT(t), js, bucket)
	if err != nil {
		testenv.Missing(t, "nats create bucket: "+err.Error())
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = js.DeleteKeyValue(ctx, bucket)
	})
	return kv
}
