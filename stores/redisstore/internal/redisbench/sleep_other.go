//go:build !linux

package redisbench

import "time"

// sleeper waits until a time with time.Sleep (on Linux, a timerfd).
type sleeper struct{}

func newSleeper() (*sleeper, error) { return &sleeper{}, nil }

func (*sleeper) until(t time.Time) error {
	time.Sleep(time.Until(t))
	return nil
}

func (*sleeper) Close() error { return nil }
