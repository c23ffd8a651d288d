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

	"github.com/idem-go/idem/storekit"

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

// errInterrupted is what the guarded function returns when idem itself was
// interrupted (SIGINT, SIGTERM, SIGHUP) and the command did not succeed:
// the run was given up, not failed, so the claim is released and nothing
// is recorded, whatever -on-failure says (as the Guard does for a caller's
// cancellation under OnFailure(Lock)).
var errInterrupted = errors.New("idem was interrupted while the command ran")

// runConfig is what "idem run" was asked to do: its flags, checked.
type runConfig struct {
	key        keyFlags
	args       []string // COMMAND and its arguments
	guardOpts  []idem.Option
	logger     *slog.Logger // -v, or nil
	lock       bool         // -on-failure lock
	payload    string
	hasPayload bool
	timeout    time.Duration
	waitFor    time.Duration
	killGrace  time.Duration
	inProgExit int
	quiet      bool
	silent     bool
	maxOut     sizeFlag
}

// parseRun reads the flags of "idem run". done is true when the command
// must exit at once with code (a usage error, -h).
func (c *cli) parseRun(args []string) (cfg *runConfig, code int, done bool) {
	fs := c.newFlagSet("run", "idem run [flags] -key KEY [--] COMMAND [ARG...]", runAbout)
	cfg = &runConfig{}
	var (
		onDup     = fs.String("on-duplicate", "return", "`policy` for a duplicate: return (exit 75 while KEY is in progress, else replay), raise (75, or 79 instead of a replay), or wait")
		onFail    = fs.String("on-failure", "unlock", "`policy` after a non-zero exit: unlock (the next run runs again) or lock (record the failure and replay it)")
		ttl       = fs.Duration("ttl", (24 * time.Hour), "how long the outcome is kept and replayed")
		takeover  = fs.Duration("takeover-after", (30 * time.Second), "a claim whose heartbeat is this old is stale and taken over")
		heartbeat = fs.Duration("heartbeat", 0, "how often a run refreshes its claim (default "+(5*time.Second).String()+", or a third of -takeover-after if shorter)")
		verbose   = fs.Bool("v", false, "log claims, replays, waits and takeovers on standard error")
	)
	fs.StringVar(&cfg.payload, "payload", "", "the `inputs` of the run: a later run of KEY with another payload exits 65")
	fs.DurationVar(&cfg.timeout, "timeout", 0, "stop COMMAND after this long (0: no limit)")
	fs.DurationVar(&cfg.waitFor, "wait-timeout", 0, "with -on-duplicate wait, give up (exit 75) after this long (0: no limit)")
	fs.DurationVar(&cfg.killGrace, "kill-grace", 10*time.Second, "time between SIGTERM and SIGKILL when COMMAND is stopped")
	fs.IntVar(&cfg.inProgExit, "in-progress-exit", exitInProgress, "exit `status` when another run holds KEY")
	fs.BoolVar(&cfg.quiet, "q", false, "do not report a run in progress on standard error")
	fs.BoolVar(&cfg.silent, "silent-replay", false, "do not print the recorded output on a replay (still exit with its status)")
	c.addKeyFlags(fs, &cfg.key)
	fs.Var(&cfg.maxOut, "max-output", "record at most `size` bytes of standard output, e.g. 64KiB; 0 records none (default 1MiB; 256KiB on DynamoDB)")
	if code, done := parse(fs, args); done {
		return nil, code, true
	}
	fs.Visit(func(f *flag.Flag) {
		if f.Name == "payload" {
			cfg.hasPayload = true
		}
	})
	cfg.args = fs.Args()
	if len(cfg.args) == 0 || cfg.args[0] == "" {
		c.errorf("run: no COMMAND given")
		fs.Usage()
		return nil, exitUsage, true
	}
	if !c.runPolicies(cfg, *onDup, *onFail) || !c.checkRunLimits(cfg, *heartbeat) {
		return nil, exitUsage, true
	}
	// The Guard always unlocks: a failure to be kept under -on-failure lock
	// is returned to it as a result, so a command that never started is
	// released whatever the policy.
	cfg.guardOpts = append(cfg.guardOpts, idem.WithTTL(*ttl), idem.WithTakeoverAfter(*takeover), idem.OnFailure(idem.Unlock))
	if *heartbeat > 0 {
		cfg.guardOpts = append(cfg.guardOpts, idem.WithHeartbeat(*heartbeat))
	}
	if *verbose {
		cfg.logger = slog.New(slog.NewTextHandler(c.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	if _, code := c.guardOptions(&cfg.key); code != 0 {
		return nil, code, true
	}
	return cfg, 0, false
}

// runPolicies sets cfg's duplicate and failure policies from the values
// of -on-duplicate and -on-failure. It reports false after reporting a
// value it does not know.
func (c *cli) runPolicies(cfg *runConfig, onDup, onFail string) bool {
	switch onDup {
	case "return":
		cfg.guardOpts = append(cfg.guardOpts, idem.OnDuplicate(idem.Return))
	case "raise":
		cfg.guardOpts = append(cfg.guardOpts, idem.OnDuplicate(idem.Raise))
	case "wait":
		cfg.guardOpts = append(cfg.guardOpts, idem.OnDuplicate(idem.Wait))
	default:
		c.errorf("-on-duplicate: want return, raise or wait, got %q", onDup)
		return false
	}
	switch onFail {
	case "unlock":
	case "lock":
		cfg.lock = true
	default:
		c.errorf("-on-failure: want unlock or lock, got %q", onFail)
		return false
	}
	return true
}

// checkRunLimits reports whether cfg's durations and exit status, and
// -heartbeat, are in range, after reporting the first that is not.
func (c *cli) checkRunLimits(cfg *runConfig, heartbeat time.Duration) bool {
	switch {
	case cfg.timeout < 0:
		c.errorf("-timeout must not be negative")
	case cfg.waitFor < 0:
		c.errorf("-wait-timeout must not be negative")
	case cfg.killGrace <= 0:
		c.errorf("-kill-grace must be positive")
	case cfg.inProgExit < 0 || cfg.inProgExit > 255:
		c.errorf("-in-progress-exit must be 0..255")
	case heartbeat < 0:
		c.errorf("-heartbeat must be positive")
	default:
		return true
	}
	return false
}

func (c *cli) runCmd(ctx context.Context, args []string) int {
	cfg, code, done := c.parseRun(args)
	if done {
		return code
	}
	st, err := openStore(ctx, cfg.key.store)
	if err != nil {
		c.errorf("%v", err)
		return storeOpenExit(err)
	}
	defer st.Close()
	limit := int64(defaultMaxOutput)
	if st.kind == kindDynamoDB {
		limit = dynamoMaxOutput
	}
	if cfg.maxOut.set {
		limit = cfg.maxOut.n
		if st.kind == kindDynamoDB && limit > dynamoMaxOutput {
			c.errorf("warning: -max-output %d is over %d; a DynamoDB item holds at most %d KB, and an outcome that does not fit is not recorded", limit, dynamoMaxOutput, dynamoItemLimitKB)
		}
	}
	if limit > 1<<30 {
		c.errorf("-max-output must be at most 1GiB")
		return exitUsage
	}
	inner := st.Store
	if testWrapStore != nil {
		inner = testWrapStore(inner)
	}
	lw := &leaseWatch{}
	opts := append(cfg.guardOpts[:len(cfg.guardOpts):len(cfg.guardOpts)], idem.WithObserver(lw.Observe))
	if cfg.logger != nil {
		opts = append(opts, idem.WithLogger(cfg.logger))
	}
	g, sk, code := c.storageKey(inner, &cfg.key, opts...)
	if code != 0 {
		return code
	}
	r := &runner{cli: c, cfg: cfg, g: g, sk: sk, limit: int(limit), lease: lw}
	return c.runExit(ctx, cfg, r.run(ctx), lw)
}

// runner runs COMMAND under a Guard's claim.
type runner struct {
	cli   *cli
	cfg   *runConfig
	g     *idem.Guard[outcome]
	sk    string
	limit int
	lease *leaseWatch
}

// runResult is what came of a run, for runExit.
type runResult struct {
	v           outcome // the replayed outcome, when err is nil and ran is nil
	err         error   // from the Guard
	ran         *outcome
	startFailed *startError
	lapse       error // set when the Guard stopped COMMAND: its claim went unrefreshed (the Guard's cause)
	waitExpired bool  // -wait-timeout passed while another run held the key
}

func (r *runner) run(ctx context.Context) runResult {
	var res runResult
	// The wait deadline bounds the wait for a duplicate only: it is disarmed
	// as soon as this run gets the claim.
	doCtx := ctx
	var (
		waitMu      sync.Mutex
		waitExpired bool
		started     bool
	)
	if r.cfg.waitFor > 0 {
		wctx, cancel := context.WithCancelCause(ctx)
		defer cancel(nil)
		timer := time.AfterFunc(r.cfg.waitFor, func() {
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
	if r.cfg.hasPayload {
		callOpts = append(callOpts, idem.Payload(r.cfg.payload))
	}
	fn := func(fctx context.Context) (outcome, error) {
		waitMu.Lock()
		started = true
		expired := waitExpired
		waitMu.Unlock()
		if expired {
			return outcome{}, errWaitTimeout
		}
		token, _ := idem.FencingToken(fctx)
		c := r.cli
		out, err := execute(fctx, execSpec{
			args:       r.cfg.args,
			env:        childEnv(c.environ(), token, r.sk),
			stdin:      c.stdin,
			stdout:     c.stdout,
			stderr:     c.stderr,
			maxOutput:  r.limit,
			timeout:    r.cfg.timeout,
			killGrace:  r.cfg.killGrace,
			lapseGrace: r.lease.killGrace,
		})
		if cause := context.Cause(fctx); r.lease.lapsed(cause) {
			res.lapse = cause
			res.ran = &out
			return out, errLeaseExpired // release, never record: the command was cut short
		}
		if err != nil {
			errors.As(err, &res.startFailed)
			return out, err
		}
		res.ran = &out
		if out.Exit != 0 && ctx.Err() != nil {
			return out, errInterrupted // release, never record: the run was given up
		}
		if out.Exit != 0 && !r.cfg.lock {
			return out, &exitError{code: out.Exit}
		}
		return out, nil
	}
	res.v, res.err = r.g.Do(doCtx, r.cfg.key.key, fn, callOpts...)
	res.waitExpired = errors.Is(res.err, errWaitTimeout) || errors.Is(context.Cause(doCtx), errWaitTimeout)
	return res
}

// runExit maps what came of a run to idem's exit status, reporting on
// standard error what the status alone does not say.
func (c *cli) runExit(ctx context.Context, cfg *runConfig, res runResult, lw *leaseWatch) int {
	err := res.err
	if res.lapse != nil {
		c.errorf("the claim could not be refreshed in time (%v; heartbeat: %v); the command was stopped (exit %d) so that a run taking the key over cannot overlap it", res.lapse, lw.heartbeatErr(), res.ran.Exit)
		if rest := withoutErr(err, errLeaseExpired); rest != nil {
			c.errorf("releasing the claim: %v", rest)
		}
		return exitLost
	}
	if res.ran != nil { // this run ran COMMAND; its output is already out
		return c.afterRun(*res.ran, err)
	}
	if res.startFailed != nil {
		c.errorf("%v", res.startFailed)
		if code := res.startFailed.code; code == exitNotFound || code == exitCannotExec {
			return code
		}
		return exitSoftware
	}
	if err == nil {
		return c.replay(res.v, cfg.silent)
	}
	if res.waitExpired {
		if !cfg.quiet {
			c.errorf("another run still holds the key after -wait-timeout %v", cfg.waitFor)
		}
		return cfg.inProgExit
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
		if !cfg.quiet {
			c.errorf("another run holds the key (in progress); not running")
		}
		return cfg.inProgExit
	case errors.Is(err, idem.ErrDuplicate):
		c.errorf("the key already ran (-on-duplicate raise); not running")
		return exitDuplicate
	}
	c.errorf("%v", err)
	return exitFor(err)
}

// testWrapStore, when set by a test, wraps the store a run uses, to inject
// faults.
var testWrapStore func(storekit.Store) storekit.Store

// afterRun is the exit status of a run that ran COMMAND, given what the
// Guard said about recording it.
func (c *cli) afterRun(res outcome, err error) int {
	var ee *exitError
	switch {
	case err == nil:
		return res.Exit
	case errors.Is(err, errInterrupted):
		c.errorf("interrupted: the command was stopped (exit %d); its claim was released and the outcome not recorded", res.Exit)
		if rest := withoutErr(err, errInterrupted); rest != nil {
			c.errorf("releasing the claim: %v", rest)
		}
		return res.Exit
	case errors.Is(err, idem.ErrLostOwnership):
		c.errorf("lost the claim while the command ran (another run took it over, or it was deleted); the command was stopped (exit %d)", res.Exit)
		return exitLost
	case errors.Is(err, idem.ErrNotRecorded):
		c.errorf("the command ran (exit %d) but its outcome was not recorded: %v", res.Exit, err)
		return exitNotRecorded
	case errors.Is(err, idem.ErrOutcomeUnknown):
		c.errorf("the command ran (exit %d); whether its outcome was recorded is unknown (the store did not answer): %v", res.Exit, err)
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
		case "IDEM_SECRET", "IDEM_PREVIOUS_SECRETS", "IDEM_FENCING_TOKEN", "IDEM_STORAGE_KEY":
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
