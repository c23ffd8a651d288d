package redisbench

import (
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// sleeper waits until a time with the precision of the kernel's
// high-resolution timers: a timerfd read through the runtime's poller.
// time.Sleep cannot do that for short waits on an idle process: the
// runtime's poller waits in whole milliseconds, so a sleep of 200µs lasts
// about 1.1ms there.
type sleeper struct {
	fd int
	f  *os.File
}

func newSleeper() (*sleeper, error) {
	fd, err := unix.TimerfdCreate(unix.CLOCK_MONOTONIC, unix.TFD_NONBLOCK|unix.TFD_CLOEXEC)
	if err != nil {
		return nil, os.NewSyscallError("timerfd_create", err)
	}
	return &sleeper{fd: fd, f: os.NewFile(uintptr(fd), "timerfd")}, nil
}

// until returns at t (at once when t has passed).
func (s *sleeper) until(t time.Time) error {
	d := time.Until(t)
	if d <= 0 {
		return nil
	}
	spec := unix.ItimerSpec{Value: unix.NsecToTimespec(d.Nanoseconds())}
	if err := unix.TimerfdSettime(s.fd, 0, &spec, nil); err != nil {
		return os.NewSyscallError("timerfd_settime", err)
	}
	var expirations [8]byte
	_, err := s.f.Read(expirations[:])
	return err
}

func (s *sleeper) Close() error { return s.f.Close() }
