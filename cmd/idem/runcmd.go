package main

import (
	"context"
	"errors"
	"flag"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/idem-go/idem"
)

const runAbout = `Runs COMMAND unless KEY already ran. The first run records COMMAND's exit
status and standard output; later runs of KEY print the recorded output and
exit with the recorded status. See "idem -h" for stores and exit statuses.

Examples:
  # A cron job installed on every host: once a day across all of them; the
  # hosts that find it running stay silent, the others replay its output.
  idem run -store redis://redis.internal:6379/0 -in-progress-exit 0 -q \
      -key "$(idem key -s nightly-report "$(date +%F)")" -- ./report.sh

  # Wait for a run in progress elsewhere (at most 10 minutes), and keep a
  # failure: a failed migration is not retried until someone looks at it.
  idem run -on-duplicate wait -wait-timeout 10m -on-failure lock \
      -key migrate-v42 -- ./migrate.sh
`

// errWaitTimeout ends a wait for a duplicate run under -wait-timeout.
var errWaitTimeout = errors.New("-wait-timeout passed while another run holds the key")

func (c *cli) runCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("run", "idem run [flags] -key KEY [--] COMMAND [ARG...]", runAbout)
	var (
		k          keyFlags
		onDup      = fs.String("on-duplicate", "return", "`policy` for a duplicate: return (exit 75 while KEY is in progress, else replay), raise (75, or 79 instead of a replay), or wait")
		onFail     = fs.String("on-failure", "unlock", "`policy` after a non-zero exit: unlock (the next run runs again) or lock (record the failure and replay it)")
		ttl        = fs.Duration("ttl", idem.DefaultTTL, "how long the outcome is kept and replayed")
		takeover   = fs.Duration("takeover-after", idem.DefaultTakeoverAfter, "a claim whose heartbeat is this old is stale and taken over")
		heartbeat  = fs.Duration("heartbeat", 0, "how often a run refreshes its claim (default 5s, or a third of -takeover-after)")
		payload    = fs.String("payload", "", "the `inputs` of the run: a later run of KEY with another payload exits 65")
		timeout    = fs.Duration("timeout", 0, "stop COMMAND after this long (0: no limit)")
		waitFor    = fs.Duration("wait-timeout", 0, "with -on-duplicate wait, give up (exit 75) after this long (0: no limit)")
		killGrace  = fs.Duration("kill-grace", 10*time.Second, "time between SIGTERM and SIGKILL when COMMAND is stopped")
		inProgExit = fs.Int("in-progress-exit", exitInProgress, "exit `status` when another run holds KEY")
		quiet      = fs.Bool("q", false, "do not report a run in progress on standard error")
		silent     = fs.Bool("silent-replay", false, "do not print the recorded output on a replay (still exit with its status)")
		verbose    = fs.Bool("v", false, "log claims, replays, waits and takeovers on standard error")
		maxOut     sizeFlag
	)
	c.addKeyFlags(fs, &k)
	fs.Var(&maxOut, "max-output", "record at most `size` bytes of standard output, e.g. 64KiB; 0 records none (default 1MiB; 256KiB on DynamoDB)")
	var hasPayload bool
	if code, done := parse(fs, args); done {
		return code
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "payload" {
			hasPayload = true
		}
	})
	cmdArgs := fs.Args()
	if len(cmdArgs) == 0 || cmdArgs[0] == "" {
		c.errorf("run: no COMMAND given")
		fs.Usage()
		return exitUsage
	}

	var opts []idem.Option
	switch *onDup {
	case "return":
		opts = append(opts, idem.OnDuplicate(idem.Return))
	case "raise":
		opts = append(opts, idem.OnDuplicate(idem.Raise))
	case "wait":
		opts = append(opts, idem.OnDuplicate(idem.Wait))
	default:
		c.errorf("-on-duplicate: want return, raise or wait, got %q", *onDup)
		return exitUsage
	}
	lock := false
	switch *onFail {
	case "unlock":
	case "lock":
		lock = true
	default:
		c.errorf("-on-failure: want unlock or lock, got %q", *onFail)
		return exitUsage
	}
	switch {
	case *timeout < 0:
		c.errorf("-timeout must not be negative")
		return exitUsage
	case *waitFor < 0:
		c.errorf("-wait-timeout must not be negative")
		return exitUsage
	case *killGrace <= 0:
		c.errorf("-kill-grace must be positive")
		return exitUsage
	case *inProgExit < 0 || *inProgExit > 255:
		c.errorf("-in-progress-exit must be 0..255")
		return exitUsage
	case *heartbeat < 0:
		c.errorf("-heartbeat must be positive")
		return exitUsage
	}
	// The Guard always unlocks: a failure to be kept under -on-failure lock
	// is returned to it as a result, so a command that never started is
	// released whatever the policy.
	opts = append(opts, idem.WithTTL(*ttl), idem.WithTakeoverAfter(*takeover), idem.OnFailure(idem.Unlock))
	if *heartbeat > 0 {
		opts = append(opts, idem.WithHeartbeat(*heartbeat))
	}
	if *verbose {
		opts = append(opts, idem.WithLogger(slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))))
	}
	if _, code := c.guardOptions(&k); code != 0 {
		return code
	}

	st, err := openStore(ctx, k.store)
	if err != nil {
		c.errorf("%v", err)
		return storeOpenExit(err)
	}
	defer st.Close()
	inner := st.Store
	if testWrapStore != nil {
		inner = testWrapStore(inner)
	}
	guarded, lease := wrapLease(inner)
	g, sk, code := c.storageKey(guarded, &k, opts...)
	if code != 0 {
		return code
	}
	limit := int64(defaultMaxOutput)
	if st.kind == kindDynamoDB {
		limit = dynamoMaxOutput
	}
	if maxOut.set {
		limit = maxOut.n
		if st.kind == kindDynamoDB && limit > dynamoMaxOutput {
			c.errorf("warning: -max-output %d is over %d; a DynamoDB item holds at most %d KB, and an outcome that does not fit is not recorded", limit, dynamoMaxOutput, dynamoItemLimitKB)
		}
	}
	if limit > 1<<30 {
		c.errorf("-max-output must be at most 1GiB")
		return exitUsage
	}

	// The wait deadline bounds the wait for a duplicate only: it is disarmed
	// as soon as this run gets the claim.
	doCtx := ctx
	var (
		waitMu      sync.Mutex
		waitExpired bool
		started     bool
	)
	if *waitFor > 0 {
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		timer := time.AfterFunc(*waitFor, func() {
			waitMu.Lock()
			defer waitMu.Unlock()
			if !started {
				waitExpired = true
				cancel(errWaitTimeout)
			}
		})
		defer timer.Stop()
		doCtx = wctx
	}

	var callOpts []idem.CallOption
	if hasPayload {
		callOpts = append(callOpts, idem.Payload(*payload))
	}
	beat := *heartbeat
	if beat == 0 {
		beat = min(idem.DefaultHeartbeat, *takeover/3)
	}
	var ran *outcome
	var startFailed *startError
	var leaseExpired bool
	fn := func(fctx context.Context) (outcome, error) {
		waitMu.Lock()
		started = true
		expired := waitExpired
		waitMu.Unlock()
		if expired {
			return outcome{}, errWaitTimeout
		}
		token, _ := idem.FencingToken(fctx)
		// Stop the command one heartbeat before the claim could look stale
		// elsewhere, if no refresh has succeeded since.
		lctx, stopWatch := watchLease(fctx, lease, *takeover-beat)
		res, err := execute(lctx, execSpec{
			args:       cmdArgs,
			env:        childEnv(c.environ(), token, sk),
			stdin:      c.stdin,
			stdout:     c.stdout,
			stderr:     c.stderr,
			maxOutput:  int(limit),
			timeout:    *timeout,
			killGrace:  *killGrace,
			leaseGrace: beat / 2,
		})
		stopWatch()
		if (errors.Is(context.Cause(lctx), errLeaseExpired) && fctx.Err() == nil) || isLapse(context.Cause(fctx)) {
			leaseExpired = true
			ran = &res
			return res, errLeaseExpired // release, never record: the command was cut short
		}
		if err != nil {
			errors.As(err, &startFailed)
			return res, err
		}
		ran = &res
		if res.Exit != 0 && !lock {
			return res, &exitError{code: res.Exit}
		}
		return res, nil
	}
	v, err := g.Do(doCtx, k.key, fn, callOpts...)

	if leaseExpired {
		c.errorf("the claim could not be refreshed for %v (heartbeat: %v); the command was stopped (exit %d) so that a run taking the key over cannot overlap it", *takeover-beat, lease.heartbeatErr(), ran.Exit)
		if rest := withoutErr(err, errLeaseExpired); rest != nil {
			c.errorf("releasing the claim: %v", rest)
		}
		return exitLost
	}
	if ran != nil { // this run ran COMMAND; its output is already out
		return c.afterRun(*ran, err)
	}
	if startFailed != nil {
		c.errorf("%v", startFailed)
		if code := startFailed.code; code == exitNotFound || code == exitCannotExec {
			return code
		}
		return exitSoftware
	}
	if err == nil {
		return c.replay(v, *silent)
	}
	if errors.Is(err, errWaitTimeout) || errors.Is(context.Cause(doCtx), errWaitTimeout) {
		if !*quiet {
			c.errorf("another run still holds the key after -wait-timeout %v", *waitFor)
		}
		return *inProgExit
	}
	switch {
	case errors.Is(err, idem.ErrPayloadMismatch):
		c.errorf("the key was used with a different -payload; not running")
		return exitMismatch
	case errors.Is(err, idem.ErrInProgress):
		if ctx.Err() != nil {
			c.errorf("interrupted while waiting for another run")
			return exitInProgress
		}
		if !*quiet {
			c.errorf("another run holds the key (in progress); not running")
		}
		return *inProgExit
	case errors.Is(err, idem.ErrDuplicate):
		c.errorf("the key already ran (-on-duplicate raise); not running")
		return exitDuplicate
	}
	c.errorf("%v", err)
	return exitFor(err)
}

// testWrapStore, when set by a test, wraps the store a run uses, to inject
// faults.
var testWrapStore func(idem.Store) idem.Store

// afterRun is the exit status of a run that ran COMMAND, given what the
// Guard said about recording it.
func (c *cli) afterRun(res outcome, err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return res.Exit
	case errors.Is(err, idem.ErrLostOwnership):
		c.errorf("lost the claim while the command ran (another run took it over, or it was deleted); the command was stopped (exit %d)", res.Exit)
		return exitLost
	case errors.Is(err, idem.ErrNotRecorded):
		c.errorf("the command ran (exit %d) but its outcome was not recorded: %v", res.Exit, err)
		return exitNotRecorded
	case errors.As(err, &ee):
		if rest := withoutErr(err, ee); rest != nil {
			// The command failed and the claim could not be released: the
			// next run waits for it to go stale.
			c.errorf("the command failed (exit %d) and its claim could not be released: %v", res.Exit, rest)
		}
		return res.Exit
	}
	c.errorf("the command ran (exit %d): %v", res.Exit, err)
	return exitFor(err)
}

// withoutErr returns the errors joined with target in err, or nil.
func withoutErr(err, target error) error {
	j, ok := err.(interface{ Unwrap() []error })
	if !ok {
		return nil
	}
	var rest []error
	for _, e := range j.Unwrap() {
		if !errors.Is(e, target) {
			rest = append(rest, e)
		}
	}
	return errors.Join(rest...)
}

// replay prints a recorded outcome and returns its exit status.
func (c *cli) replay(v outcome, silent bool) int {
	if v.V != outcomeVersion {
		c.errorf("the recorded outcome has unknown version %d (written by a newer idem?)", v.V)
		return exitSoftware
	}
	if !silent {
		if _, err := c.stdout.Write(v.Stdout); err != nil {
			c.errorf("writing the recorded output: %v", err)
		}
		if v.truncated() {
			c.errorf("the recorded output was truncated: %d of %d bytes replayed", len(v.Stdout), v.StdoutLen)
		}
	}
	if v.Exit < 0 || v.Exit > 255 {
		return exitSoftware
	}
	return v.Exit
}

// childEnv is the command's environment: idem's own, without IDEM_SECRET,
// plus the fencing token and the storage key.
func childEnv(env []string, token int64, sk string) []string {
	out := make([]string, 0, len(env)+2)
	for _, kv := range env {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "IDEM_SECRET", "IDEM_FENCING_TOKEN", "IDEM_STORAGE_KEY":
			continue
		}
		out = append(out, kv)
	}
	return append(out, "IDEM_FENCING_TOKEN="+strconv.FormatInt(token, 10), "IDEM_STORAGE_KEY="+sk)
}

// storeOpenExit is the exit status for a store that could not be opened.
func storeOpenExit(err error) int {
	var ce *StoreConfigError
	if errors.As(err, &ce) {
		return exitConfig
	}
	return exitFor(err)
}
