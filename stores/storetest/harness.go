package storetest

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"
)

// Harness says, once, how to make the store under test and what it
// supports. Run runs a suite for every field that is set and skips the
// suites of the fields left unset. A store whose configurations differ in
// what they support (a cluster, a second dialect, another claim path) runs
// Run once per configuration, each in a subtest of its own.
type Harness struct {
	// NewStore makes a store on real time. It is called once per
	// subtest of the RealTime suite: the store's operations, claims going
	// stale and records expiring in real time (the suite sleeps), Guards
	// over a store whose replies come late, and the clean-up checks when
	// the store is a Purger. Rotation runs on it too.
	NewStore func(t *testing.T) storekit.Store
	// NewStoreWithClock makes a store that reads the time from c (a
	// store's WithClock option takes c.Now), for the Clock suite: the
	// store's operations again, on a clock the suite advances instead of
	// sleeping (so it checks timestamps exactly), each subtest with a
	// Clock of its own.
	NewStoreWithClock func(t *testing.T, c *Clock) storekit.Store

	// Corrupt lets the suite check that a damaged record is reported as
	// storekit.ErrCorruptRecord and never overwritten: it must overwrite
	// the stored record for key (which exists) with undecodable data,
	// bypassing the Store interface. It is handed stores made by NewStore
	// and NewStoreWithClock.
	Corrupt func(t *testing.T, s storekit.Store, key string)
	// ClockSkew is how far the store's clock may be from the test's when
	// the RealTime suite checks record timestamps (default 2s).
	ClockSkew time.Duration
	// NativeExpiry declares that the store deletes a completed or failed
	// record at its expires_at exactly (DESIGN rules 9 and 10, Redis):
	// the record and its attempt count are gone then, so a claim after
	// that expiry starts again at attempt 1 instead of continuing the
	// count.
	NativeExpiry bool
	// Watch declares that the stores NewStore and NewStoreWithClock make
	// implement storekit.Watcher: the Watch check then fails on one that
	// does not. Unset, the check runs on a store that is a Watcher and
	// skips on one that is not.
	Watch bool

	// List makes a store whose listing (storekit.Lister) the List suite
	// checks: records in each state listed back once each, in their
	// state; a released one not listed; no claim held up by a listing.
	List func(t *testing.T) storekit.Store
	// Purge declares runs of the clean-up checks (the store is a Purger)
	// on stores built with a known retention: each run checks that Purge
	// keeps every live record, never loses a race with a claim, a
	// heartbeat or a completion, and removes a record only once its
	// retention has passed. A run on real time needs a retention short
	// enough to pass within the test (0, or a few seconds).
	Purge []Purge
	// Rotation runs the secret rotation checks (idem.WithSecret with
	// previous secrets) with Guards over stores made by NewStore.
	Rotation bool

	// Processes runs at-most-once execution across OS processes sharing
	// the store: the test binary re-run as several children, each with
	// many Guards over the same keys.
	Processes *ProcessConfig
	// RotationProcesses is Processes in the middle of a rotation's second
	// deploy: half the children configured WithSecret(A, B), half
	// WithSecret(B, A).
	RotationProcesses *ProcessConfig
	// RotationOrders is Processes with six children, each configured
	// with another order of three secrets, under every duplicate policy,
	// plain and with steps. Its Duplicate and Steps are ignored.
	RotationOrders *ProcessConfig
	// StepCrash runs the cases of an owner process SIGKILLed or
	// SIGSTOPped in the middle of a call's steps and taken over by
	// another process.
	StepCrash *StepCrashConfig
	// DeadOwner runs the cases of an owner process that dies (SIGKILL)
	// or stops (SIGSTOP) while it holds a claim, under the default
	// takeover threshold: a dead owner's claim is taken over at once
	// where the store can tell (Presence) and when the process restarts
	// with the same WithInstanceID; a live one never is.
	DeadOwner *DeadOwnerConfig
}

// Purge is one run of the clean-up checks (PurgeKeepsLive,
// PurgeAfterRetention, PurgeRace) on stores built with a known retention.
// Set one of NewStore and NewStoreWithClock.
type Purge struct {
	// Name names the run's subtest under Purge; default "Retention"
	// followed by the retention ("Retention0s"), "ClockRetention..." on a
	// clock.
	Name string
	// NewStore makes a store on real time whose retention is Retention.
	NewStore func(t *testing.T) storekit.Store
	// NewStoreWithClock makes a store that reads the time from c and
	// whose retention is Retention.
	NewStoreWithClock func(t *testing.T, c *Clock) storekit.Store
	// Retention is how long the store keeps a record past its ExpiresAt
	// before Purge may remove it (the store's own WithRetention). It must
	// not be negative.
	Retention time.Duration
	// ClockSkew is how far the store's clock may be from the test's, on
	// real time (default: the Harness's).
	ClockSkew time.Duration
}

// Run runs every suite h declares, each as a subtest of t with a stable
// name, one after the other (the checks within a suite run in parallel):
//
//	RealTime/<check>      NewStore
//	Clock/<check>         NewStoreWithClock
//	List                  List
//	Purge/<name>/<check>  Purge
//	Rotation/<case>       Rotation (on NewStore)
//	Processes             Processes
//	RotationProcesses     RotationProcesses
//	RotationOrders/<case> RotationOrders
//	StepCrash/<case>      StepCrash
//	DeadOwner/<case>      DeadOwner
//
// A suite h does not declare is a skipped subtest that says so. The
// process suites re-run the test binary with -test.run naming their
// subtest: the test that calls Run must build the same Harness in the
// child (it does, when the Harness depends only on the environment).
func Run(t *testing.T, h Harness) {
	t.Helper()
	if h.NewStore == nil && h.NewStoreWithClock == nil && h.List == nil && len(h.Purge) == 0 &&
		h.Processes == nil && h.RotationProcesses == nil && h.RotationOrders == nil && h.StepCrash == nil && h.DeadOwner == nil {
		t.Fatal("storetest.Run: the Harness declares nothing to run")
	}
	su := suite{corrupt: h.Corrupt, skew: 2 * time.Second, native: h.NativeExpiry, mustWatch: h.Watch}
	if h.ClockSkew > 0 {
		su.skew = h.ClockSkew
	}
	t.Run("RealTime", func(t *testing.T) {
		if h.NewStore == nil {
			t.Skip("no Harness.NewStore")
		}
		runCore(t, func(t *testing.T, _ *Clock) storekit.Store { return h.NewStore(t) }, false, su)
	})
	t.Run("Clock", func(t *testing.T) {
		if h.NewStoreWithClock == nil {
			t.Skip("no Harness.NewStoreWithClock: the store does not take a clock")
		}
		runCore(t, h.NewStoreWithClock, true, su)
	})
	t.Run("List", func(t *testing.T) {
		if h.List == nil {
			t.Skip("no Harness.List: the store's listing is not checked")
		}
		runList(t, h.List(t))
	})
	t.Run("Purge", func(t *testing.T) {
		if len(h.Purge) == 0 {
			t.Skip("no Harness.Purge: the store does not clean up after itself, or its clean-up is checked with its default retention only")
		}
		for _, p := range h.Purge {
			runPurge(t, p, su)
		}
	})
	t.Run("Rotation", func(t *testing.T) {
		if !h.Rotation || h.NewStore == nil {
			t.Skip("no Harness.Rotation (with a NewStore)")
		}
		runRotation(t, h.NewStore)
	})
	t.Run("Processes", func(t *testing.T) {
		if h.Processes == nil {
			t.Skip("no Harness.Processes")
		}
		runProcesses(t, *h.Processes)
	})
	t.Run("RotationProcesses", func(t *testing.T) {
		if h.RotationProcesses == nil {
			t.Skip("no Harness.RotationProcesses")
		}
		runRotationProcesses(t, *h.RotationProcesses)
	})
	t.Run("RotationOrders", func(t *testing.T) {
		if h.RotationOrders == nil {
			t.Skip("no Harness.RotationOrders")
		}
		runRotationOrders(t, *h.RotationOrders)
	})
	t.Run("StepCrash", func(t *testing.T) {
		if h.StepCrash == nil {
			t.Skip("no Harness.StepCrash")
		}
		runStepCrash(t, *h.StepCrash)
	})
	t.Run("DeadOwner", func(t *testing.T) {
		if h.DeadOwner == nil {
			t.Skip("no Harness.DeadOwner")
		}
		runDeadOwner(t, *h.DeadOwner)
	})
}

// runPurge runs the clean-up checks of p as a subtest of t.
func runPurge(t *testing.T, p Purge, su suite) {
	t.Helper()
	clock := p.NewStoreWithClock != nil
	name := p.Name
	if name == "" {
		name = "Retention" + p.Retention.String()
		if clock {
			name = "Clock" + name
		}
	}
	t.Run(name, func(t *testing.T) {
		if (p.NewStore != nil) == clock {
			t.Fatal("storetest: a Purge sets one of NewStore and NewStoreWithClock")
		}
		if p.Retention < 0 {
			t.Fatalf("storetest: a Purge's retention must not be negative, got %v", p.Retention)
		}
		su.retention, su.retentionKnown = p.Retention, true
		if p.ClockSkew > 0 {
			su.skew = p.ClockSkew
		}
		newStore := p.NewStoreWithClock
		if !clock {
			newStore = func(t *testing.T, _ *Clock) storekit.Store { return p.NewStore(t) }
		}
		runTests(t, newStore, clock, su, purgeTests)
	})
}
