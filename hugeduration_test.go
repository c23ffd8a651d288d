package idem_test

import (
	"errors"
	"math"
	"testing"
	"time"

	"github.com/idem-go/idem"
)

// TestHugeDurationOptions: a heartbeat interval or takeover threshold past
// The largest threshold (math.MaxInt64/4) is an invalid option. (WithHeartbeat(math.MaxInt64) beside
// the default 30s threshold is the case to refuse: twice the interval
// wraps negative, would pass the check that it is at most half the
// threshold, and a claim would never heartbeat.) A huge TTL and local cache age are
// accepted.
func TestHugeDurationOptions(t *testing.T) {
	s := mustMem()
	for name, opts := range map[string][]idem.Option{
		"heartbeat MaxInt64":              {idem.WithHeartbeat(math.MaxInt64)},
		"heartbeat MaxInt64/2+1":          {idem.WithHeartbeat(math.MaxInt64/2 + 1)},
		"takeover MaxInt64":               {idem.WithTakeoverAfter(math.MaxInt64)},
		"takeover and heartbeat MaxInt64": {idem.WithTakeoverAfter(math.MaxInt64), idem.WithHeartbeat(math.MaxInt64 / 2)},
	} {
		if _, err := idem.New[int](s, opts...); !errors.Is(err, idem.ErrInvalidOption) {
			t.Errorf("%s: %v, want ErrInvalidOption", name, err)
		}
	}
	for name, opts := range map[string][]idem.Option{
		"largest threshold":        {idem.WithTakeoverAfter(time.Duration(math.MaxInt64 / 4)), idem.WithHeartbeat(time.Duration(math.MaxInt64/4) / 2)},
		"TTL MaxInt64":             {idem.WithTTL(math.MaxInt64)},
		"local cache age MaxInt64": {idem.WithLocalCache(10, math.MaxInt64)},
	} {
		if _, err := idem.New[int](s, opts...); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
