package dynamostore_test

import (
	"bytes"
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

// A 500 KB result makes an item DynamoDB refuses (400 KB limit): the record
// completes without the result, so fn ran once and replays, even past the
// takeover threshold, get ErrResultUnavailable. (Before, the claim stayed in
// progress with ErrNotRecorded and a caller after the threshold ran fn
// again.)
func TestOversizedResultCompletesWithoutResult(t *testing.T) {
	s := newEnv(t).store
	// The threshold bounds the completion's retries too: long enough for
	// a loaded DynamoDB Local to answer a 500 KB write.
	const threshold = 2 * time.Second
	g, err := idem.New[[]byte](s, idem.WithTakeoverAfter(threshold), idem.WithHeartbeat(threshold/4))
	if err != nil {
		t.Fatal(err)
	}
	big := bytes.Repeat([]byte{0xab}, 500<<10)
	var runs atomic.Int32
	fn := func(ctx context.Context) ([]byte, error) { runs.Add(1); return big, nil }
	v, err := g.Do(context.Background(), "big", fn)
	if err != nil || !bytes.Equal(v, big) {
		t.Fatalf("first call: %d bytes, %v; want the result and no error", len(v), err)
	}
	time.Sleep(threshold + threshold/4) // past the threshold
	if _, err := g.Do(context.Background(), "big", fn); !errors.Is(err, idem.ErrResultUnavailable) {
		t.Fatalf("replay: %v, want ErrResultUnavailable", err)
	}
	if n := runs.Load(); n != 1 {
		t.Fatalf("fn ran %d times", n)
	}
}
