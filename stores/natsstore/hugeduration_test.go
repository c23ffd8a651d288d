package natsstore_test

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
)

// TestHugeRetentionOutlivesMaxAge: on a bucket with a max age, a record
// kept for WithRetention(math.MaxInt64) outlives the max age and the claim
// is refused before fn runs. (The lifetime plus the retention wrapped
// negative, and the claim was accepted.)
func TestHugeRetentionOutlivesMaxAge(t *testing.T) {
	_, js := connect(t, testenv.NATSURL(t))
	kv, err := natsstore.CreateBucket(ctxT(t), js, randName("idemtest_"), natsstore.WithMaxAge(2*time.Hour))
	require.NoError(t, err)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), kv.Bucket()) })
	s, err := natsstore.New(kv, natsstore.WithoutCleanup(), natsstore.WithRetention(math.MaxInt64))
	require.NoError(t, err)
	g, err := idem.New[int](s, idem.WithTTL(time.Hour))
	require.NoError(t, err)
	ran := false
	_, err = g.Do(ctxT(t), "k", func(context.Context) (int, error) { ran = true; return 1, nil })
	var mae *natsstore.MaxAgeError
	require.ErrorAs(t, err, &mae)
	require.Equal(t, time.Duration(math.MaxInt64), mae.Lifetime)
	require.False(t, ran, "fn ran")
}
