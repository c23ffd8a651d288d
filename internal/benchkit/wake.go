package benchkit

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
)

// WakeLatency measures how long after an owner's call returns a waiter in
// another Guard returns: the owner's Guard sits on owner, the waiter's on
// waiter (stores of their own over one backend, as two processes would
// have), both with idem.OnDuplicate(idem.Wait) and the takeover threshold
// takeover, which bounds the poll interval of a waiter whose store cannot
// push. The waiter has been waiting 100-300ms when the owner finishes. The
// samples are returned sorted.
func WakeLatency(ctx context.Context, owner, waiter storekit.Store, samples int, takeover time.Duration) ([]time.Duration, error) {
	if samples < 1 {
		return nil, fmt.Errorf("benchkit: %d samples", samples)
	}
	opts := []idem.Option{idem.OnDuplicate(idem.Wait), idem.WithTakeoverAfter(takeover), idem.WithHeartbeat(takeover / 3)}
	ga, err := idem.New[string](owner, opts...)
	if err != nil {
		return nil, err
	}
	gb, err := idem.New[string](waiter, opts...)
	if err != nil {
		return nil, err
	}
	prefix := uniq("wake-") + "-"
	out := make([]time.Duration, 0, samples)
	for i := range samples {
		key := prefix + strconv.Itoa(i)
		started, release := make(chan struct{}), make(chan struct{})
		aErr := make(chan error, 1)
		go func() {
			_, err := ga.Do(ctx, key, func(context.Context) (string, error) {
				close(started)
				<-release
				return "v", nil
			})
			aErr <- err
		}()
		select {
		case <-started:
		case err := <-aErr:
			return nil, fmt.Errorf("benchkit: owner: %w", err)
		}
		bDone := make(chan error, 1)
		var end time.Time
		go func() {
			_, err := gb.Do(ctx, key, func(context.Context) (string, error) {
				return "", errors.New("benchkit: the waiter ran fn")
			})
			end = time.Now()
			bDone <- err
		}()
		time.Sleep(100*time.Millisecond + time.Duration(i%5)*50*time.Millisecond)
		close(release)
		if err := <-aErr; err != nil {
			return nil, fmt.Errorf("benchkit: owner: %w", err)
		}
		finished := time.Now()
		if err := <-bDone; err != nil {
			return nil, fmt.Errorf("benchkit: waiter: %w", err)
		}
		out = append(out, max(end.Sub(finished), 0))
	}
	slices.Sort(out)
	return out, nil
}

// Quantile returns the q quantile (0 <= q < 1) of sorted durations, 0 for
// none: Quantile(d, 0.5) is the median.
func Quantile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(int(float64(len(sorted))*q), len(sorted)-1)]
}
