package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/filestore"
)

// record is what idem inspect prints.
type record struct {
	Key            string                `json:"key,omitempty"`
	Tenant         string                `json:"tenant,omitempty"`
	Scope          string                `json:"scope,omitempty"`
	StorageKey     string                `json:"storage_key"`
	Store          string                `json:"store"`
	State          storekit.RecordState  `json:"state,omitempty"`
	Status         storekit.Status       `json:"status"`
	Attempt        int64                 `json:"attempt"`
	StartedAt      string                `json:"started_at"`
	StartedAtMs    int64                 `json:"started_at_ms"`
	HeartbeatAt    string                `json:"heartbeat_at"`
	HeartbeatAtMs  int64                 `json:"heartbeat_at_ms"`
	HeartbeatAgeMs *int64                `json:"heartbeat_age_ms,omitempty"`
	Stale          *bool                 `json:"stale,omitempty"`
	Owner          string                `json:"owner,omitempty"`       // the process that made an in-progress claim
	OwnerState     string                `json:"owner_state,omitempty"` // alive, gone (taken over at once) or unknown
	CompletedAt    string                `json:"completed_at,omitempty"`
	CompletedAtMs  int64                 `json:"completed_at_ms,omitempty"`
	ExpiresAt      string                `json:"expires_at"`
	ExpiresAtMs    int64                 `json:"expires_at_ms"`
	PayloadHash    string                `json:"payload_hash"`
	ResultBytes    int                   `json:"result_bytes"`
	Result         json.RawMessage       `json:"result,omitempty"`        // a program's result, when it is JSON
	ResultBase64   string                `json:"result_base64,omitempty"` // a program's result, when it is not
	ExitCode       *int                  `json:"exit_code,omitempty"`
	StdoutBytes    *int                  `json:"stdout_bytes,omitempty"`
	StdoutTotal    *int64                `json:"stdout_total_bytes,omitempty"`
	Truncated      *bool                 `json:"stdout_truncated,omitempty"`
	Error          *idem.RecordedFailure `json:"error,omitempty"`
	ResultError    string                `json:"result_error,omitempty"`
}

const inspectAbout = `Prints the live record of KEY (or of -storage-key, as idem ls prints it)
as JSON, or, with -stdout, its recorded standard output. A record that
idem run did not write (a Go program's call) shows its stored result: as
"result" when it is JSON, else as "result_base64". Exits 66 when there is
no live record.
`

// lookup opens the store and reads the record of the key in k. On failure
// it has reported the error and returns the exit status.
func (c *cli) lookup(ctx context.Context, k *keyFlags) (*openedStore, string, *storekit.Record, int) {
	if _, code := c.guardOptions(k); code != 0 {
		return nil, "", nil, code
	}
	st, err := openExisting(ctx, k.store)
	if err != nil {
		c.errorf("%v", err)
		return nil, "", nil, storeOpenExit(err)
	}
	_, sk, code := c.storageKey(st, k)
	if code != 0 {
		st.Close()
		return nil, "", nil, code
	}
	rec, err := st.Get(ctx, sk)
	if err != nil {
		if errors.Is(err, storekit.ErrNotFound) {
			c.errorf("no live record for the key in %s", st.desc)
			if c.getenv("IDEM_SECRET") == "" {
				c.errorf("IDEM_SECRET is not set: records written with a secret (IDEM_SECRET, idem.WithSecret) " +
					"have other storage keys: set the writers' secret, and give their -tenant and -scope")
			}
		} else {
			c.errorf("%v", err)
		}
		st.Close()
		return nil, "", nil, exitFor(err)
	}
	return st, sk, rec, 0
}

// lookupStorageKey opens the store and reads the record of a storage key
// (as idem ls prints it). On failure it has reported the error and returns
// the exit status.
func (c *cli) lookupStorageKey(ctx context.Context, spec, sk string) (*openedStore, string, *storekit.Record, int) {
	st, err := openExisting(ctx, spec)
	if err != nil {
		c.errorf("%v", err)
		return nil, "", nil, storeOpenExit(err)
	}
	rec, err := st.Get(ctx, sk)
	if err != nil {
		if errors.Is(err, storekit.ErrNotFound) {
			c.errorf("no live record for the storage key in %s", st.desc)
		} else {
			c.errorf("%v", err)
		}
		st.Close()
		return nil, "", nil, exitFor(err)
	}
	return st, sk, rec, 0
}

func (c *cli) inspectCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("inspect", "idem inspect [flags] -key KEY|-storage-key SK", inspectAbout)
	var k keyFlags
	c.addKeyFlags(fs, &k)
	takeover := fs.Duration("takeover-after", (30 * time.Second), "threshold for the \"stale\" field of an in-progress record")
	stdout := fs.Bool("stdout", false, "print the recorded standard output instead of the record")
	storageKey := fs.String("storage-key", "", "the record's storage `key` as idem ls prints it, instead of -key")
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	st, sk, rec, code := c.lookupEither(ctx, &k, *storageKey)
	if code != 0 {
		return code
	}
	defer st.Close()

	out := record{
		Key: k.key, Tenant: k.tenant, Scope: k.scope, StorageKey: sk, Store: st.desc,
		Status: rec.Status, Attempt: rec.Attempt,
		StartedAt: formatMs(rec.StartedAt), StartedAtMs: rec.StartedAt,
		HeartbeatAt: formatMs(rec.HeartbeatAt), HeartbeatAtMs: rec.HeartbeatAt,
		CompletedAt: formatMs(rec.CompletedAt), CompletedAtMs: rec.CompletedAt,
		ExpiresAt: formatMs(rec.ExpiresAt), ExpiresAtMs: rec.ExpiresAt,
		PayloadHash: rec.PayloadHash, ResultBytes: len(rec.Result), Error: rec.Error,
	}
	now := time.Now().UnixMilli()
	out.State = rec.State(now, *takeover)
	if rec.Status == storekit.StatusInProgress && !rec.StepsEpoch() {
		age := now - rec.HeartbeatAt
		stale := rec.Stale(now, *takeover)
		out.HeartbeatAgeMs, out.Stale = &age, &stale
		out.Owner, out.OwnerState = ownerState(ctx, st, rec)
	}
	var res *outcome
	if rec.Status == storekit.StatusCompleted && rec.Error == nil {
		var o outcome
		switch {
		case json.Unmarshal(rec.Result, &o) == nil && o.V == outcomeVersion:
			res = &o
			n, trunc := len(o.Stdout), o.truncated()
			out.ExitCode, out.StdoutBytes, out.StdoutTotal, out.Truncated = &o.Exit, &n, &o.StdoutLen, &trunc
		case len(rec.Result) == 0:
			out.ResultError = "the record holds no result (it could not be encoded when the call completed)"
		case json.Valid(rec.Result):
			// A Go program's result, in its Guard's codec (JSON by default).
			out.Result = json.RawMessage(rec.Result)
		default:
			out.ResultBase64 = base64.StdEncoding.EncodeToString(rec.Result)
		}
	}
	if *stdout {
		switch {
		case res != nil:
			if _, err := c.stdout.Write(res.Stdout); err != nil {
				c.errorf("%v", err)
				return exitSoftware
			}
			return exitOK
		case rec.Status == storekit.StatusInProgress:
			c.errorf("the key is in progress: nothing recorded yet")
			return exitInProgress
		case out.Result != nil || out.ResultBase64 != "":
			c.errorf("the record holds a program's result, not a command's output: idem inspect without -stdout prints it")
			return exitSoftware
		default:
			c.errorf("the record holds no recorded output (%s)", rec.Status)
			return exitSoftware
		}
	}
	enc := json.NewEncoder(c.stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(out); err != nil {
		c.errorf("%v", err)
		return exitSoftware
	}
	return exitOK
}

const unlockAbout = `Releases the in-progress claim of KEY (or of -storage-key, as idem ls
prints it), so the next run of KEY runs its command at once instead of
waiting for the claim to go stale. The record is
kept, expired, so fencing tokens keep counting up. A completed or failed
record is refused (exit 77) unless -force is given; -force deletes the record
whatever its state (given -key, under every secret of IDEM_SECRET and
IDEM_PREVIOUS_SECRETS), and a run still holding it stops its command at its
next heartbeat. The records of a call's steps are kept: a new run of the
call replays its finished steps.
A steps_epoch record (idem ls) is refused with or without -force (exit 77):
it is not a claim, and releasing or deleting it would make its call's
finished steps run again.
`

func (c *cli) unlockCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("unlock", "idem unlock [flags] -key KEY|-storage-key SK [-force]", unlockAbout)
	var k keyFlags
	c.addKeyFlags(fs, &k)
	force := fs.Bool("force", false, "delete the record whatever its state")
	storageKey := fs.String("storage-key", "", "the record's storage `key` as idem ls prints it, instead of -key")
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	st, sk, rec, code := c.lookupEither(ctx, &k, *storageKey)
	if code != 0 {
		return code
	}
	defer st.Close()
	if rec.StepsEpoch() {
		// Never released nor deleted, -force or not: the call's next
		// attempt would find no epoch and run its finished steps again.
		c.errorf("the record is a call's steps epoch (state %s), not a claim: releasing or deleting it "+
			"would make the call's finished steps run again, so unlock refuses it (with or without -force); "+
			"it expires with its call", storekit.StateStepsEpoch)
		return exitRefused
	}
	if rec.StepRecord() && rec.Status != storekit.StatusInProgress {
		// A finished step: deleting it would make it run again.
		c.errorf("the record is a finished step of a call (%s), not a claim: deleting it would make the step run again, "+
			"so unlock refuses it (with or without -force); it expires with its call", rec.Status)
		return exitRefused
	}
	if *force && *storageKey != "" {
		// Only the storage key is known: the record is deleted; the
		// records of its steps, if any, are left to expire.
		if err := st.Delete(ctx, sk); err != nil {
			c.errorf("%v", err)
			return exitFor(err)
		}
		fmt.Fprintf(c.stdout, "deleted the %s record (attempt %d)\n", rec.Status, rec.Attempt)
		return exitOK
	}
	if *force {
		// The call's record, under the active secret and every previous
		// one (so that no record of a rotation still answers), whatever
		// its state. Not Guard.Forget: that deletes the call's steps epoch
		// too, and a retry would run the call's finished steps again. The
		// steps are kept, and a new run of the call replays them.
		sks, code := c.callKeys(st, &k)
		if code != 0 {
			return code
		}
		for _, sk := range sks {
			if err := st.Delete(ctx, sk); err != nil {
				c.errorf("%v", err)
				return exitFor(err)
			}
		}
		fmt.Fprintf(c.stdout, "deleted the %s record (attempt %d)\n", rec.Status, rec.Attempt)
		return exitOK
	}
	if rec.Status != storekit.StatusInProgress {
		c.errorf("the key is %s, not in progress; use -force to delete the record", rec.Status)
		return exitRefused
	}
	// Release is conditioned on the nonce and on the record being in
	// progress: a run that completed or was taken over since Get is never
	// undone.
	if err := st.Release(ctx, sk, rec.Nonce); err != nil {
		if errors.Is(err, idem.ErrLostOwnership) {
			c.errorf("the record changed since it was read (completed, released or taken over); inspect it again")
			return exitInProgress
		}
		c.errorf("%v", err)
		return exitFor(err)
	}
	age := time.Since(time.UnixMilli(rec.HeartbeatAt)).Round(time.Millisecond)
	fmt.Fprintf(c.stdout, "released the claim (attempt %d, last heartbeat %v ago)\n", rec.Attempt, age)
	return exitOK
}

// callKeys returns the storage keys of the key in k: under IDEM_SECRET,
// then under each of IDEM_PREVIOUS_SECRETS (where a rotation may have left
// the key's record).
func (c *cli) callKeys(st storekit.Store, k *keyFlags) ([]string, int) {
	_, sk, code := c.storageKey(st, k)
	if code != 0 {
		return nil, code
	}
	sks := []string{sk}
	if p := c.getenv("IDEM_PREVIOUS_SECRETS"); p != "" {
		for _, secret := range strings.Split(p, ",") {
			g, err := idem.New[outcome](st, idem.WithNamespace(k.tenant, k.scope), idem.WithSecret([]byte(secret)))
			if err != nil {
				c.errorf("%s", flagMessage(err))
				return nil, exitUsage
			}
			psk, err := guardinfo.StorageKey(g, k.key)
			if err != nil {
				c.errorf("-key: %v", err)
				return nil, exitUsage
			}
			sks = append(sks, psk)
		}
	}
	return sks, 0
}

const purgeAbout = `Deletes expired records from a file, SQL or NATS store. Redis and DynamoDB
expire records natively, so there is nothing to do there.
`

func (c *cli) purgeCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("purge", "idem purge [flags]", purgeAbout)
	var spec string
	c.addStoreFlag(fs, &spec)
	grace := fs.Duration("grace", 0, "keep records until they have been expired this long (purging forgets a key's attempt counter)")
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	if *grace < 0 {
		c.errorf("-grace must not be negative")
		return exitUsage
	}
	st, err := openExisting(ctx, spec)
	if err != nil {
		c.errorf("%v", err)
		return storeOpenExit(err)
	}
	defer st.Close()
	switch st.kind {
	case kindFile:
		if st.absent {
			fmt.Fprintf(c.stdout, "purged 0 expired records from %s\n", st.desc)
			return exitOK
		}
		fst, err := filestore.New(st.desc, filestore.WithRetention(*grace))
		if err != nil {
			c.errorf("%v", err)
			return exitConfig
		}
		n, err := fst.Purge(ctx)
		if err != nil {
			c.errorf("purged %d records, then: %v", n, err)
			return exitFor(err)
		}
		fmt.Fprintf(c.stdout, "purged %d expired records from %s\n", n, st.desc)
	case kindMem:
		n, err := st.mem.Purge(ctx)
		if err != nil {
			c.errorf("%v", err)
			return exitFor(err)
		}
		fmt.Fprintf(c.stdout, "purged %d expired records from %s\n", n, st.desc)
	case kindRedis:
		fmt.Fprintln(c.stdout, "nothing to purge: Redis deletes expired records itself (PEXPIREAT at expiry plus a safety buffer)")
	case kindDynamoDB:
		fmt.Fprintln(c.stdout, "nothing to purge: DynamoDB deletes expired records itself (TTL attribute \"ttl\"; deletion can lag by hours, and expired records never count)")
	case kindSQL, kindNATS:
		n, err := st.purge(ctx, *grace)
		if err != nil {
			c.errorf("%v", err)
			return exitFor(err)
		}
		fmt.Fprintf(c.stdout, "purged %d expired records from %s\n", n, st.desc)
	}
	return exitOK
}

const keyAbout = `Prints a canonical key for NAME and ARGs: NAME, a colon, and the SHA-256 of
the arguments as canonical JSON, exactly as idem.Key(NAME, ARG...) in Go.
Each ARG is parsed as JSON (42, true, "text", {"a":1}); with -s every ARG is
a string.

  idem key invoice 42 '"EUR"'        same as idem.Key("invoice", 42, "EUR")
  idem key -s nightly-report 2024-05-01
  idem key -- "$NAME" ...            a NAME that may start with "-"
`

func (c *cli) keyCmd(args []string) int {
	fs := c.newFlagSet("key", "idem key [-s] NAME [ARG...]", keyAbout)
	strs := fs.Bool("s", false, "take every ARG as a string instead of JSON")
	if code, done := parse(fs, args); done {
		return code
	}
	if fs.NArg() == 0 {
		c.errorf("key: no NAME given")
		fs.Usage()
		return exitUsage
	}
	name, rest := fs.Arg(0), fs.Args()[1:]
	vals := make([]any, len(rest))
	for i, a := range rest {
		if *strs {
			vals[i] = a
			continue
		}
		v, err := parseJSONArg(a)
		if err != nil {
			c.errorf("key: argument %d %q is not JSON (quote strings: '\"text\"', or use -s): %v", i+1, a, err)
			return exitUsage
		}
		vals[i] = v
	}
	key, err := idem.Key(name, vals...)
	if err != nil {
		c.errorf("key: %v", err)
		return exitUsage
	}
	fmt.Fprintln(c.stdout, key)
	return exitOK
}

// parseJSONArg decodes exactly one JSON value, keeping numbers exact.
func parseJSONArg(s string) (any, error) {
	dec := json.NewDecoder(bytes.NewReader([]byte(s)))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, err
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("more than one value")
	}
	return v, nil
}

// lookupEither finds the record that -key (k) or -storage-key
// (storageKey) names: exactly one of them must be given.
func (c *cli) lookupEither(ctx context.Context, k *keyFlags, storageKey string) (*openedStore, string, *storekit.Record, int) {
	switch {
	case storageKey == "" && k.key == "":
		c.errorf("-key or -storage-key is required")
		return nil, "", nil, exitUsage
	case storageKey != "" && k.key != "":
		c.errorf("give -key or -storage-key, not both")
		return nil, "", nil, exitUsage
	case storageKey != "":
		return c.lookupStorageKey(ctx, k.store, storageKey)
	}
	return c.lookup(ctx, k)
}

// ownerState returns the owner of an in-progress record and whether its
// process is alive, gone (the next claim takes the record over at once) or
// unknown (the store cannot tell, or the record names no owner), as the
// store's claim would judge it.
func ownerState(ctx context.Context, st *openedStore, rec *storekit.Record) (owner, state string) {
	lc, ok := st.Store.(storekit.LivenessChecker)
	if rec.Owner == "" || !ok {
		return rec.Owner, storekit.LivenessUnknown.String()
	}
	l, err := lc.OwnerLiveness(ctx, rec.Owner)
	if err != nil {
		return rec.Owner, storekit.LivenessUnknown.String()
	}
	return rec.Owner, l.String()
}
