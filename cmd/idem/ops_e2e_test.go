//go:build unix

package main

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"

	"github.com/idem-go/idem/storekit"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/internal/testenv"
)

// programStore is a file store in a temporary directory, for records that
// a Go program writes in the test process and the binary then reads.
func programStore(t *testing.T) (spec string, st *openedStore) {
	t.Helper()
	spec = "file:" + filepath.Join(t.TempDir(), "records")
	st, err := openStore(context.Background(), spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	return spec, st
}

// lsJSON runs idem ls -json and returns its records by storage key.
func lsJSON(t *testing.T, spec string) (map[string]record, map[string]map[string]any) {
	t.Helper()
	iv := runBin(t, env{}, "ls", "-store", spec, "-json")
	if iv.code != 0 {
		t.Fatalf("ls -json: %v", iv)
	}
	recs, raw := map[string]record{}, map[string]map[string]any{}
	for _, line := range strings.Split(strings.TrimSpace(iv.stdout), "\n") {
		var r record
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			t.Fatalf("ls -json line %q: %v", line, err)
		}
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatal(err)
		}
		recs[r.StorageKey], raw[r.StorageKey] = r, m
	}
	return recs, raw
}

// TestBinaryStepsEpoch: a Go program's call with a step leaves a steps
// epoch record. idem ls shows it as steps_epoch (no heartbeat age, never
// in_progress or stale), idem stats counts it apart, and idem unlock
// refuses it with and without -force, leaving it in place.
func TestBinaryStepsEpoch(t *testing.T) {
	ctx := context.Background()
	spec, st := programStore(t)
	g, err := idem.New[string](st.Store)
	if err != nil {
		t.Fatal(err)
	}
	steps := 0
	call := func(ctx context.Context) (string, error) {
		return idem.Step(ctx, "charge", func(ctx context.Context) (string, error) {
			steps++
			return "ch_1", nil
		})
	}
	if v, err := g.Do(ctx, "order-1", call); err != nil || v != "ch_1" {
		t.Fatalf("Do: %q, %v", v, err)
	}
	callKey, err := guardinfo.StorageKey(g, "order-1")
	if err != nil {
		t.Fatal(err)
	}

	recs, epoch := lsStepsEpoch(t, spec, callKey)
	checkStepsEpochListed(t, spec, epoch)
	checkStepRecordsRefused(t, spec, st, recs, callKey, epoch)

	// The call, forgotten by the binary's unlock -storage-key -force (its
	// record only), runs again and replays its finished step.
	if iv := runBin(t, env{}, "unlock", "-store", spec, "-storage-key", callKey, "-force"); iv.code != 0 {
		t.Fatalf("unlock -force of the call's record: %v", iv)
	}
	if v, err := g.Do(ctx, "order-1", call); err != nil || v != "ch_1" || steps != 1 {
		t.Fatalf("the call again: %q, %v, the step ran %d times; want once", v, err, steps)
	}
	// So does unlock -key -force: it deletes the call's record, not its
	// steps epoch.
	if iv := runBin(t, env{}, "unlock", "-store", spec, "-key", "order-1", "-force"); iv.code != 0 {
		t.Fatalf("unlock -key -force: %v", iv)
	}
	if _, err := st.Get(ctx, callKey); !errors.Is(err, storekit.ErrNotFound) {
		t.Fatalf("unlock -key -force left the call's record: %v", err)
	}
	if rec, err := st.Get(ctx, epoch); err != nil || !rec.StepsEpoch() {
		t.Fatalf("unlock -key -force deleted the steps epoch: %+v, %v", rec, err)
	}
	if v, err := g.Do(ctx, "order-1", call); err != nil || v != "ch_1" || steps != 1 {
		t.Fatalf("the call after unlock -key -force: %q, %v, the step ran %d times; want once", v, err, steps)
	}
}

// lsStepsEpoch checks idem ls -json lists the call, its step and one steps
// epoch, printed without a claim's heartbeat age and staleness, and returns
// the records and the epoch's storage key.
func lsStepsEpoch(t *testing.T, spec, callKey string) (map[string]record, string) {
	t.Helper()
	recs, raw := lsJSON(t, spec)
	var epoch string
	for sk, r := range recs {
		switch {
		case r.State == storekit.StateStepsEpoch:
			if epoch != "" {
				t.Errorf("two steps epochs: %s and %s", epoch, sk)
			}
			epoch = sk
			for _, f := range []string{"heartbeat_age_ms", "stale"} {
				if _, ok := raw[sk][f]; ok {
					t.Errorf("ls -json prints %q for the steps epoch, as for a claim: %v", f, raw[sk])
				}
			}
		case r.State != storekit.StateCompleted:
			t.Errorf("ls: %s is %s, want completed (the call and its step)", sk, r.State)
		}
	}
	if epoch == "" || len(recs) != 3 || recs[callKey].State != storekit.StateCompleted {
		t.Fatalf("ls listed %v; want the call, its step and one steps_epoch record", recs)
	}
	return recs, epoch
}

// checkStepsEpochListed checks idem ls -state steps_epoch shows the epoch
// with no heartbeat age, and idem stats counts it apart.
func checkStepsEpochListed(t *testing.T, spec, epoch string) {
	t.Helper()
	iv := runBin(t, env{}, "ls", "-store", spec, "-state", "steps_epoch")
	if iv.code != 0 || !strings.Contains(iv.stdout, epoch) || strings.Count(iv.stdout, "\n") != 2 {
		t.Fatalf("ls -state steps_epoch: %v", iv)
	}
	line := strings.Fields(strings.Split(iv.stdout, "\n")[1])
	if len(line) != 5 || line[0] != "steps_epoch" || line[3] != "-" {
		t.Errorf("ls line of the steps epoch: %q; want state steps_epoch and no heartbeat age", line)
	}

	iv = runBin(t, env{}, "stats", "-store", spec, "-json")
	var counts map[string]int
	if err := json.Unmarshal([]byte(iv.stdout), &counts); iv.code != 0 || err != nil {
		t.Fatalf("stats -json: %v (%v)", iv, err)
	}
	for k, n := range map[string]int{"in_progress": 0, "stale": 0, "completed": 2, "steps_epoch": 1, "total": 3} {
		if counts[k] != n {
			t.Errorf("stats: %s = %d, want %d (%s)", k, counts[k], n, iv.stdout)
		}
	}
}

// checkStepRecordsRefused checks idem unlock refuses the steps epoch, with
// and without -force, and the finished step's record, leaving both in place.
func checkStepRecordsRefused(t *testing.T, spec string, st *openedStore, recs map[string]record, callKey, epoch string) {
	t.Helper()
	ctx := context.Background()
	for _, args := range [][]string{
		{"unlock", "-store", spec, "-storage-key", epoch},
		{"unlock", "-store", spec, "-storage-key", epoch, "-force"},
	} {
		iv := runBin(t, env{}, args...)
		if iv.code != exitRefused || !strings.Contains(iv.stderr, "steps epoch") || !strings.Contains(iv.stderr, "run again") {
			t.Errorf("%q: %v; want exit %d and a message that the steps would run again", args, iv, exitRefused)
		}
		rec, err := st.Get(ctx, epoch)
		if err != nil || !rec.StepsEpoch() || rec.Status != storekit.StatusInProgress {
			t.Fatalf("%q changed the steps epoch: %+v, %v", args, rec, err)
		}
	}

	// A finished step's record is refused too: deleting it would run the
	// step again.
	for sk := range recs {
		if sk == callKey || sk == epoch {
			continue
		}
		iv := runBin(t, env{}, "unlock", "-store", spec, "-storage-key", sk, "-force")
		if iv.code != exitRefused || !strings.Contains(iv.stderr, "finished step") {
			t.Errorf("unlock -force of the step's record: %v; want exit %d and a message that it is a finished step", iv, exitRefused)
		}
		if rec, err := st.Get(ctx, sk); err != nil || !rec.StepRecord() {
			t.Fatalf("unlock -force changed the step's record: %+v, %v", rec, err)
		}
	}
}

// TestBinaryUnlockForceRotation: unlock -key -force deletes the key's
// record under a previous secret of a rotation too.
func TestBinaryUnlockForceRotation(t *testing.T) {
	ctx := context.Background()
	spec, sk, st := invoiceRecord(t, "order-9", idem.WithSecret([]byte("old-secret-0123456789")))
	e := env{"IDEM_SECRET": "new-secret-0123456789", "IDEM_PREVIOUS_SECRETS": "old-secret-0123456789"}
	g, err := idem.New[invoice](st.Store, idem.WithSecret([]byte("new-secret-0123456789")))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(ctx, "order-9", func(context.Context) (invoice, error) { return invoice{"inv_new", 1}, nil }); err != nil {
		t.Fatal(err)
	}
	if iv := runBin(t, e, "unlock", "-store", spec, "-key", "order-9", "-force"); iv.code != 0 {
		t.Fatalf("unlock -key -force: %v", iv)
	}
	if _, err := st.Get(ctx, sk); !errors.Is(err, storekit.ErrNotFound) {
		t.Errorf("the record under the previous secret is left: %v", err)
	}
	if iv := runBin(t, e, "inspect", "-store", spec, "-key", "order-9"); iv.code != exitNoRecord {
		t.Errorf("inspect after unlock -force: %v", iv)
	}
}

// inspected is what the tests read of idem inspect's output about a
// program's result.
type inspected struct {
	StorageKey   string          `json:"storage_key"`
	Status       storekit.Status `json:"status"`
	ResultBytes  int             `json:"result_bytes"`
	Result       json.RawMessage `json:"result"`
	ResultBase64 string          `json:"result_base64"`
	ResultError  string          `json:"result_error"`
	ExitCode     *int            `json:"exit_code"`
}

// rawCodec stores a []byte result as it is.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) { return v.([]byte), nil }
func (rawCodec) Unmarshal(data []byte, v any) error {
	*(v.(*[]byte)) = append([]byte(nil), data...)
	return nil
}

type invoice struct {
	ID     string
	Amount int
}

// invoiceRecord has a Go program record an invoice for key under opts in
// a fresh file store, and returns the store and the record's storage key.
func invoiceRecord(t *testing.T, key string, opts ...idem.Option) (spec, sk string, st *openedStore) {
	t.Helper()
	spec, st = programStore(t)
	g, err := idem.New[invoice](st.Store, opts...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.Do(context.Background(), key, func(context.Context) (invoice, error) { return invoice{"inv_1", 1999}, nil }); err != nil {
		t.Fatal(err)
	}
	if sk, err = guardinfo.StorageKey(g, key); err != nil {
		t.Fatal(err)
	}
	return spec, sk, st
}

// inspectProgram runs idem inspect with args and checks that it shows the
// invoice invoiceRecord recorded, as JSON, under the storage key sk.
func inspectProgram(t *testing.T, e env, sk string, args ...string) {
	t.Helper()
	iv := runBin(t, e, args...)
	var r inspected
	if err := json.Unmarshal([]byte(iv.stdout), &r); iv.code != 0 || err != nil {
		t.Fatalf("%q: %v (%v)", args, iv, err)
	}
	var result bytes.Buffer
	_ = json.Compact(&result, r.Result)
	if r.StorageKey != sk || r.Status != storekit.StatusCompleted || r.ResultError != "" ||
		result.String() != `{"ID":"inv_1","Amount":1999}` || r.ExitCode != nil {
		t.Errorf("%q: %s; want the program's result as JSON", args, iv.stdout)
	}
}

// TestBinaryInspectProgramResult: idem inspect shows the result a Go
// program recorded: JSON as JSON, other bytes as base64.
func TestBinaryInspectProgramResult(t *testing.T) {
	spec, sk, st := invoiceRecord(t, "order-7", idem.WithNamespace("t1", "invoices"))
	inspectProgram(t, env{}, sk, "inspect", "-store", spec, "-tenant", "t1", "-scope", "invoices", "-key", "order-7")

	bin := []byte{0xff, 0x00, 'x', 0x80}
	gb, err := idem.New[[]byte](st.Store, idem.WithCodec(rawCodec{}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := gb.Do(context.Background(), "blob", func(context.Context) ([]byte, error) { return bin, nil }); err != nil {
		t.Fatal(err)
	}
	iv := runBin(t, env{}, "inspect", "-store", spec, "-key", "blob")
	var r inspected
	if err := json.Unmarshal([]byte(iv.stdout), &r); iv.code != 0 || err != nil {
		t.Fatalf("inspect of a binary result: %v (%v)", iv, err)
	}
	if r.ResultBase64 != base64.StdEncoding.EncodeToString(bin) || r.ResultBytes != len(bin) || r.Result != nil || r.ResultError != "" {
		t.Errorf("inspect of a binary result: %s", iv.stdout)
	}
	if iv := runBin(t, env{}, "inspect", "-stdout", "-store", spec, "-key", "blob"); iv.code != exitSoftware || !strings.Contains(iv.stderr, "program's result") {
		t.Errorf("inspect -stdout of a program's result: %v", iv)
	}
}

// TestBinaryInspectStorageKey: idem inspect -storage-key finds a record
// as idem ls prints it, without its key.
func TestBinaryInspectStorageKey(t *testing.T) {
	spec, sk, _ := invoiceRecord(t, "order-7", idem.WithNamespace("t1", "invoices"))
	if iv := runBin(t, env{}, "ls", "-store", spec); !strings.Contains(iv.stdout, sk) {
		t.Fatalf("ls: %v", iv)
	}
	inspectProgram(t, env{}, sk, "inspect", "-store", spec, "-storage-key", sk)
	if iv := runBin(t, env{}, "inspect", "-store", spec, "-storage-key", sk, "-key", "order-7"); iv.code != exitUsage {
		t.Errorf("inspect with -key and -storage-key: %v", iv)
	}
	if iv := runBin(t, env{}, "inspect", "-store", spec, "-storage-key", storekit.StorageKeyPrefix+strings.Repeat("0", 64)); iv.code != exitNoRecord {
		t.Errorf("inspect -storage-key of no record: %v", iv)
	}
}

// TestBinaryInspectSecretHint: a record keyed with a secret is not found
// without IDEM_SECRET, and the message then says a secret may be missing.
func TestBinaryInspectSecretHint(t *testing.T) {
	spec, sk, _ := invoiceRecord(t, "order-8", idem.WithSecret([]byte("s3cret-0123456789abc")))
	for _, sub := range []string{"inspect", "unlock"} {
		iv := runBin(t, env{"IDEM_SECRET": ""}, sub, "-store", spec, "-key", "order-8")
		if iv.code != exitNoRecord || !strings.Contains(iv.stderr, "no live record") || !strings.Contains(iv.stderr, "IDEM_SECRET is not set") {
			t.Errorf("%s of a keyed record without IDEM_SECRET: %v; want exit %d and a word on IDEM_SECRET", sub, iv, exitNoRecord)
		}
	}
	iv := runBin(t, env{"IDEM_SECRET": "another-secret-0123456789"}, "inspect", "-store", spec, "-key", "order-8")
	if iv.code != exitNoRecord || strings.Contains(iv.stderr, "IDEM_SECRET is not set") {
		t.Errorf("inspect with another IDEM_SECRET: %v", iv)
	}
	inspectProgram(t, env{"IDEM_SECRET": "s3cret-0123456789abc"}, sk, "inspect", "-store", spec, "-key", "order-8")
}

// TestBinaryHelpNamesStores: idem -h and the -store help of every
// subcommand name every store kind, and idem -h and idem purge -h agree
// on what purge is for.
func TestBinaryHelpNamesStores(t *testing.T) {
	kinds := []string{"file:", "redis://", "redis-cluster://", "dynamodb://", "postgres://", "mysql://", "sqlite://", "nats://", "mem:"}
	iv := runBin(t, env{}, "-h")
	for _, k := range kinds {
		if !strings.Contains(iv.stdout, k) {
			t.Errorf("idem -h does not name %s", k)
		}
	}
	const purgeFor = "file, SQL or NATS store"
	if !strings.Contains(iv.stdout, purgeFor) {
		t.Errorf("idem -h does not say purge is for a %s:\n%s", purgeFor, iv.stdout)
	}
	for _, sub := range []string{"run", "inspect", "unlock", "ls", "stats", "purge"} {
		iv := runBin(t, env{"IDEM_STORE": ""}, sub, "-h")
		i := strings.Index(iv.stderr, "-store URL")
		if iv.code != 0 || i < 0 {
			t.Fatalf("idem %s -h: %v", sub, iv)
		}
		help, _, _ := strings.Cut(iv.stderr[i:], "\n  -")
		for _, k := range kinds {
			if !strings.Contains(help, k) {
				t.Errorf("idem %s -h: -store does not name %s: %s", sub, k, help)
			}
		}
		if sub == "purge" && !strings.Contains(iv.stderr, purgeFor) {
			t.Errorf("idem purge -h does not say it is for a %s: %s", purgeFor, iv.stderr)
		}
	}
}

// TestBinarySQLiteFile: a sqlite:// store without migrate=1 whose file
// does not exist is a configuration mistake (exit 78, naming the file and
// migrate=1) and leaves no file behind, whichever command met it; a
// directory that does not exist is named.
func TestBinarySQLiteFile(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "idem.db")
	for _, args := range [][]string{
		{"run", "-store", "sqlite://" + db, "-key", "k", "--", "true"},
		{"ls", "-store", "sqlite://" + db},
		{"stats", "-store", "sqlite://" + db + "?table=t"},
		{"inspect", "-store", "sqlite://" + db, "-key", "k"},
	} {
		iv := runBin(t, env{}, args...)
		if iv.code != exitConfig || !strings.Contains(iv.stderr, db) || !strings.Contains(iv.stderr, "?migrate=1") || iv.stdout != "" {
			t.Errorf("%q: %v; want exit %d naming %s and ?migrate=1", args, iv, exitConfig, db)
		}
		if _, err := os.Stat(db); err == nil {
			t.Fatalf("%q created %s", args, db)
		}
	}
	missing := filepath.Join(dir, "no", "such", "dir")
	iv := runBin(t, env{}, "run", "-store", "sqlite://"+missing+"/idem.db?migrate=1", "-key", "k", "--", "true")
	if iv.code != exitConfig || !strings.Contains(iv.stderr, missing) {
		t.Errorf("migrate=1 in a directory that does not exist: %v; want exit %d naming %s", iv, exitConfig, missing)
	}
	if iv := runBin(t, env{}, "run", "-store", "sqlite://"+db+"?migrate=1", "-key", "k", "--", "echo", "hi"); iv.code != 0 || iv.stdout != "hi\n" {
		t.Fatalf("migrate=1: %v", iv)
	}
	if iv := runBin(t, env{}, "ls", "-store", "sqlite://"+db); iv.code != 0 || !strings.Contains(iv.stdout, "completed") {
		t.Errorf("ls of the database made by migrate=1: %v", iv)
	}
}

// TestBinaryReadingCreatesNothing: the commands that only read (or change
// only records that exist) create no store directory, neither the default
// one in the user cache directory nor a -store file:DIR.
func TestBinaryReadingCreatesNothing(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("the cache directory is $XDG_CACHE_HOME only on Linux")
	}
	cache := t.TempDir()
	other := filepath.Join(t.TempDir(), "records")
	for _, store := range []string{"", "file:" + other} {
		e := env{"XDG_CACHE_HOME": cache, "IDEM_STORE": store}
		for _, c := range []struct {
			args []string
			code int
		}{
			{[]string{"ls"}, 0},
			{[]string{"ls", "-json"}, 0},
			{[]string{"stats", "-json"}, 0},
			{[]string{"inspect", "-key", "k"}, exitNoRecord},
			{[]string{"unlock", "-key", "k"}, exitNoRecord},
			{[]string{"unlock", "-storage-key", storekit.StorageKeyPrefix + strings.Repeat("0", 64), "-force"}, exitNoRecord},
			{[]string{"purge"}, 0},
		} {
			if iv := runBin(t, e, c.args...); iv.code != c.code {
				t.Errorf("IDEM_STORE=%q %q: %v; want exit %d", store, c.args, iv, c.code)
			}
		}
		if iv := runBin(t, e, "stats", "-json"); !strings.Contains(iv.stdout, `"total":0`) {
			t.Errorf("stats of a store that does not exist: %v", iv)
		}
	}
	for _, d := range []string{cache, filepath.Dir(other)} {
		if ents, err := os.ReadDir(d); err != nil || len(ents) != 0 {
			t.Errorf("%s after reading commands: %v, %v; want it empty", d, ents, err)
		}
	}
	// idem run creates the default store, as before.
	if iv := runBin(t, env{"XDG_CACHE_HOME": cache, "IDEM_STORE": ""}, "run", "-key", "k", "--", "true"); iv.code != 0 {
		t.Fatalf("run: %v", iv)
	}
	if _, err := os.Stat(filepath.Join(cache, "idem", "records")); err != nil {
		t.Errorf("run did not create the default store: %v", err)
	}
}

// TestBinaryVersion: idem version prints the module's version, (devel)
// for a build from the working tree.
func TestBinaryVersion(t *testing.T) {
	iv := runBin(t, env{}, "version")
	if iv.code != 0 || !strings.HasPrefix(iv.stdout, "idem (devel) go") || iv.stderr != "" {
		t.Errorf("idem version: %v", iv)
	}
	if iv := runBin(t, env{}, "version", "extra"); iv.code != exitUsage {
		t.Errorf("idem version extra: %v", iv)
	}
	if iv := runBin(t, env{}, "-h"); !strings.Contains(iv.stdout, "idem version") {
		t.Errorf("idem -h does not list idem version")
	}
}

// TestBinaryNATSNoBucket: a nats:// store whose bucket does not exist is
// a configuration mistake, as a SQL table is: exit 78 and a word on
// ?create=1, which creates it.
func TestBinaryNATSNoBucket(t *testing.T) {
	addr := testenv.NATSURL(t)
	nc, err := nats.Connect(addr)
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	bucket := "idem_nobucket_" + randName(t)
	t.Cleanup(func() { _ = js.DeleteKeyValue(context.Background(), bucket) })
	host := strings.TrimPrefix(addr, "nats://")
	store := "nats://" + host + "/" + bucket
	e := env{"COUNTER": filepath.Join(t.TempDir(), "counter")}
	for _, args := range [][]string{
		append([]string{"run", "-store", store, "-key", "k"}, countCmd("x", 0)...),
		{"ls", "-store", store},
		{"inspect", "-store", store, "-key", "k"},
	} {
		iv := runBin(t, e, args...)
		if iv.code != exitConfig || !strings.Contains(iv.stderr, bucket) || !strings.Contains(iv.stderr, "?create=1") {
			t.Errorf("%q: %v; want exit %d naming the bucket and ?create=1", args, iv, exitConfig)
		}
	}
	if c := lines(t, e["COUNTER"]); c != 0 {
		t.Fatalf("the command ran without the bucket")
	}
	if _, err := js.KeyValue(context.Background(), bucket); err == nil {
		t.Fatal("a command without create=1 created the bucket")
	}
	if iv := runBin(t, e, append([]string{"run", "-store", store + "?create=1", "-key", "k"}, countCmd("x", 0)...)...); iv.code != 0 || iv.stdout != "x" {
		t.Fatalf("run with ?create=1: %v", iv)
	}
	if iv := runBin(t, e, "inspect", "-store", store, "-key", "k"); iv.code != 0 {
		t.Errorf("inspect after create=1: %v", iv)
	}
}
