package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"text/tabwriter"
	"time"

	"github.com/idem-go/idem/storekit"
)

const lsAbout = `Lists the live records of the store with their state (in_progress, stale,
failed, completed, steps_epoch), storage key, attempt, heartbeat age and
expiry; -json prints one JSON object per line, with idem inspect's field
names. Stores without an index of their keys (files, Redis, DynamoDB, NATS)
read their whole keyspace, a page at a time; claims go on meanwhile.
` + stepsEpochAbout

const statsAbout = `Counts the live records of the store by state (in_progress, stale,
failed, completed, steps_epoch); -json prints one object with a count per
state. Reads every record, as idem ls does.
` + stepsEpochAbout

// stepsEpochAbout says what a steps_epoch record is, for the help of the
// commands that show one.
const stepsEpochAbout = `
A steps_epoch record belongs to a Go program's call that ran idem.Step: it
names the generation of the call's recorded steps and lives as long as the
call can be retried. It is never a stuck claim (nothing heartbeats it, and
it is never in_progress or stale), and idem unlock refuses it: releasing
or deleting it would make the call's finished steps run again.
`

// listFlags are the flags idem ls and idem stats share.
type listFlags struct {
	store    string
	takeover *time.Duration
}

func (c *cli) addListFlags(fs *flag.FlagSet, l *listFlags) {
	c.addStoreFlag(fs, &l.store)
	l.takeover = fs.Duration("takeover-after", (30 * time.Second), "threshold for \"stale\", for records that do not store their owner's")
}

// listRecords opens the store and calls f for each live record and its
// state. Records that cannot be decoded are reported and counted; any
// other error ends the listing.
func (c *cli) listRecords(ctx context.Context, l *listFlags, f func(st *openedStore, rec *storekit.Record, state storekit.RecordState, now int64) bool) (corrupt int, code int) {
	st, err := openExisting(ctx, l.store)
	if err != nil {
		c.errorf("%v", err)
		return 0, storeOpenExit(err)
	}
	defer st.Close()
	lister, ok := st.Store.(storekit.Lister)
	if !ok {
		c.errorf("%s cannot list its records", st.desc)
		return 0, exitConfig
	}
	for rec, err := range lister.Records(ctx) {
		if err != nil {
			var ce *storekit.CorruptRecordError
			if errors.As(err, &ce) {
				c.errorf("%v", err)
				corrupt++
				continue
			}
			c.errorf("%v", err)
			return corrupt, exitFor(err)
		}
		now := time.Now().UnixMilli()
		if !f(st, rec, rec.State(now, *l.takeover), now) {
			break
		}
	}
	if corrupt > 0 {
		return corrupt, exitSoftware
	}
	return 0, exitOK
}

// listed is the record idem ls prints: idem inspect's fields about the
// record, and its state.
func listed(st *openedStore, rec *storekit.Record, state storekit.RecordState, now int64) record {
	out := record{
		StorageKey: rec.Key, Store: st.desc, State: state,
		Status: rec.Status, Attempt: rec.Attempt,
		StartedAt: formatMs(rec.StartedAt), StartedAtMs: rec.StartedAt,
		HeartbeatAt: formatMs(rec.HeartbeatAt), HeartbeatAtMs: rec.HeartbeatAt,
		CompletedAt: formatMs(rec.CompletedAt), CompletedAtMs: rec.CompletedAt,
		ExpiresAt: formatMs(rec.ExpiresAt), ExpiresAtMs: rec.ExpiresAt,
		PayloadHash: rec.PayloadHash, ResultBytes: len(rec.Result), Error: rec.Error,
	}
	if rec.Status == storekit.StatusInProgress && state != storekit.StateStepsEpoch {
		age := now - rec.HeartbeatAt
		stale := state == storekit.StateStale
		out.HeartbeatAgeMs, out.Stale = &age, &stale
	}
	return out
}

func (c *cli) lsCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("ls", "idem ls [flags]", lsAbout)
	var l listFlags
	c.addListFlags(fs, &l)
	stateName := fs.String("state", "", "list only the records in this `state`: in_progress, stale, failed, completed or steps_epoch")
	asJSON := fs.Bool("json", false, "print one JSON object per record, one per line")
	limit := fs.Int("limit", 0, "stop after `N` records (0: all)")
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	var want storekit.RecordState
	if *stateName != "" {
		s, err := storekit.ParseRecordState(*stateName)
		if err != nil {
			c.errorf("-state: %v", err)
			return exitUsage
		}
		want = s
	}
	if *limit < 0 {
		c.errorf("-limit must not be negative")
		return exitUsage
	}
	enc := json.NewEncoder(c.stdout)
	tw := tabwriter.NewWriter(c.stdout, 0, 0, 2, ' ', 0)
	if !*asJSON {
		fmt.Fprintln(tw, "STATE\tSTORAGE KEY\tATTEMPT\tHEARTBEAT AGE\tEXPIRES")
	}
	n := 0
	var werr error
	_, code := c.listRecords(ctx, &l, func(st *openedStore, rec *storekit.Record, state storekit.RecordState, now int64) bool {
		if want != "" && state != want {
			return true
		}
		if *asJSON {
			werr = enc.Encode(listed(st, rec, state, now))
		} else {
			age := "-"
			if rec.Status == storekit.StatusInProgress && state != storekit.StateStepsEpoch {
				age = (time.Duration(now-rec.HeartbeatAt) * time.Millisecond).String()
			}
			_, werr = fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%s\n", state, rec.Key, rec.Attempt, age, formatMs(rec.ExpiresAt))
		}
		n++
		return werr == nil && (*limit == 0 || n < *limit)
	})
	if !*asJSON && (code == exitOK || n > 0) { // no header for a store that could not be read
		if err := tw.Flush(); err != nil && werr == nil {
			werr = err
		}
	}
	if werr != nil {
		c.errorf("%v", werr)
		return exitSoftware
	}
	return code
}

func (c *cli) statsCmd(ctx context.Context, args []string) int {
	fs := c.newFlagSet("stats", "idem stats [flags]", statsAbout)
	var l listFlags
	c.addListFlags(fs, &l)
	asJSON := fs.Bool("json", false, "print one JSON object with a count per state")
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	counts := map[storekit.RecordState]int{}
	total := 0
	corrupt, code := c.listRecords(ctx, &l, func(_ *openedStore, _ *storekit.Record, state storekit.RecordState, _ int64) bool {
		counts[state]++
		total++
		return true
	})
	if code != exitOK && code != exitSoftware {
		return code
	}
	if *asJSON {
		out := map[string]int{"total": total}
		for _, s := range storekit.RecordStates() {
			out[string(s)] = counts[s]
		}
		if corrupt > 0 {
			out["corrupt"] = corrupt
		}
		if err := json.NewEncoder(c.stdout).Encode(out); err != nil {
			c.errorf("%v", err)
			return exitSoftware
		}
		return code
	}
	for _, s := range storekit.RecordStates() {
		fmt.Fprintf(c.stdout, "%-12s %d\n", s, counts[s])
	}
	if corrupt > 0 {
		fmt.Fprintf(c.stdout, "%-12s %d\n", "corrupt", corrupt)
	}
	fmt.Fprintf(c.stdout, "%-12s %d\n", "total", total)
	return code
}
