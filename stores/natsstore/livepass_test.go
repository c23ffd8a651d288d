package natsstore_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/stretchr/testify/require"

	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/natsstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestSoakLivePass (IDEM_SOAK=1) loads IDEM_SOAK_KEYS live records
// (default 20000) with results of IDEM_SOAK_RESULT bytes (default 1024)
// and times passes that find nothing expired, alternating a pass that
// decides on the records' expiry headers with one that receives every
// record and decides on it, with the bytes each received. It then times
// fresh claims alternating between a Store that publishes records itself
// and one that writes through the KV API (kv.Update), with the requests
// each sent.
func TestSoakLivePass(t *testing.T) {
	if os.Getenv("IDEM_SOAK") == "" {
		t.Skip("IDEM_SOAK=1 runs the live-pass soak")
	}
	n := soakKeys(t)
	size := 1024
	if v := os.Getenv("IDEM_SOAK_RESULT"); v != "" {
		var err error
		size, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	nc, js := connect(t, testenv.NATSURL(t))
	kv := newBucket(t, js)
	s, err := natsstore.New(kv, natsstore.WithoutCleanup())
	require.NoError(t, err)
	t0 := time.Now()
	completeAll(t, s, n, bytes.Repeat([]byte("r"), size))
	t.Logf("loaded %d live records (%d-byte results) in %v", n, size, time.Since(t0).Round(time.Millisecond))

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	defer natsstore.SetScanValues(false)
	took := map[bool][]time.Duration{}
	for i := range 6 {
		values := i%2 == 1
		natsstore.SetScanValues(values)
		in := nc.Stats().InBytes
		t0 := time.Now()
		removed, err := s.Purge(ctx)
		d := time.Since(t0)
		require.NoError(t, err)
		require.Zero(t, removed)
		took[values] = append(took[values], d)
		t.Logf("pass %d (%s): %v, %d bytes received", i+1, map[bool]string{false: "headers", true: "records"}[values], d.Round(time.Millisecond), nc.Stats().InBytes-in)
	}
	t.Logf("passes deciding on headers: %v; receiving the records: %v", took[false], took[true])

	byKV, err := natsstore.New(plainKV{kv}, natsstore.WithoutCleanup()) // kv.Update
	require.NoError(t, err)
	const claims = 2000
	lat := map[string][]time.Duration{}
	reqs := map[string]uint64{}
	for i := range 2 * claims {
		name, st := "publish", s
		if i%2 == 1 {
			name, st = "kv.Update", byKV
		}
		out := nc.Stats().OutMsgs
		t0 := time.Now()
		res, err := st.Claim(ctx, storekit.ClaimRequest{Key: storetest.NewKey(), Nonce: storetest.NewNonce(), LeaseTTL: time.Minute, TakeoverAfter: time.Minute})
		lat[name] = append(lat[name], time.Since(t0))
		reqs[name] += nc.Stats().OutMsgs - out
		require.NoError(t, err)
		require.Equal(t, storekit.Claimed, res.Outcome)
	}
	for _, name := range []string{"publish", "kv.Update"} {
		var sum time.Duration
		for _, d := range lat[name] {
			sum += d
		}
		t.Logf("fresh claim, %s: %v, mean %v, %.2f requests each", name, stats(lat[name]), (sum / claims).Round(time.Microsecond), float64(reqs[name])/claims)
	}
}
