package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/idem-go/idem/internal/guardinfo"
	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/sqlstore"
)

// Exit statuses of idem itself (see the package documentation). They follow
// sysexits.h where it has a fitting code.
const (
	exitOK           = 0
	exitUsage        = 64 // EX_USAGE
	exitMismatch     = 65 // EX_DATAERR: payload mismatch
	exitNoRecord     = 66 // EX_NOINPUT: no live record
	exitUnavailable  = 69 // EX_UNAVAILABLE: store failure
	exitSoftware     = 70 // EX_SOFTWARE: corrupt record, internal error
	exitNotRecorded  = 74 // EX_IOERR: outcome not recorded
	exitInProgress   = 75 // EX_TEMPFAIL: in progress, try again later
	exitLost         = 76 // EX_PROTOCOL: ownership lost
	exitRefused      = 77 // EX_NOPERM: unlock refused without -force
	exitConfig       = 78 // EX_CONFIG: bad store, missing SQL table or schema, missing secret
	exitDuplicate    = 79 // duplicate under -on-duplicate raise
	exitCannotExec   = 126
	exitNotFound     = 127
	exitSignalOffset = 128
)

const usageText = `idem runs a command at most once per key, across every process and host
that shares a store, and replays the recorded outcome to every duplicate.

Usage:
  idem run [flags] -key KEY [--] COMMAND [ARG...]
                           run COMMAND unless KEY already ran; replay its
                           stdout and exit status otherwise
  idem inspect [flags] -key KEY|-storage-key SK
                           print the record of KEY as JSON
  idem unlock [flags] -key KEY|-storage-key SK [-force]
                           release an in-progress claim (-force: delete any record)
  idem ls [-state S] [-json] [-limit N]
                           list the store's live records by state (in_progress,
                           stale, failed, completed, steps_epoch)
  idem stats [-json]       count the store's live records by state
  idem purge [flags]       delete expired records from a file, SQL or NATS store
                           (Redis and DynamoDB expire records themselves)
  idem key [-s] NAME [ARG...]
                           print the canonical key of NAME and JSON arguments
  idem version             print the version of idem

Run "idem SUBCOMMAND -h" for the flags of a subcommand.

Example: a cron job on several hosts, run once a day across all of them:
  idem run -store redis://redis.internal:6379/0 -in-progress-exit 0 -q \
      -key "$(idem key -s nightly-report "$(date +%F)")" -- ./report.sh

Stores (-store, default $IDEM_STORE, else a directory in the user cache):
  file:/path/to/dir                     processes on one host
  redis://[user:pass@]host:port/db[?prefix=P]   (rediss:// for TLS)
  redis-cluster://host:port[?addr=host2:port2&prefix=P]
      with replicas, one of: replica-ack=N[&replica-ack-timeout=100ms]
      (wait for N replicas) or async-replication=accept
  dynamodb://TABLE[?region=R&endpoint=URL&create=1&pk=pk&sk=sk&prefix=P]
  postgres://user:pass@host:port/db[?table=T&migrate=1&sslmode=...]
  mysql://user:pass@host:port/db[?table=T&migrate=1&tls=...]   (MySQL or MariaDB)
  sqlite://PATH[?table=T&migrate=1]     a SQLite database file; processes on one host
  nats://host:port/BUCKET[?create=1]    a JetStream KV bucket
  mem:[NAME]                            in memory, for tests
  migrate=1 creates the SQL table (and the SQLite file) if it is missing, and
  create=1 the bucket: give it on the first run.

Environment:
  IDEM_SECRET         HMAC secret for storage keys and payload hashes (shared by all hosts)
  IDEM_PREVIOUS_SECRETS  comma-separated earlier secrets, while rotating IDEM_SECRET:
                      a key recorded under one of them is found, not run again
  IDEM_STORE          default -store
  IDEM_FENCING_TOKEN  set for COMMAND: the claim's attempt number
  IDEM_STORAGE_KEY    set for COMMAND: the storage key (a hash)

Exit status of idem run: COMMAND's own (fresh run or replay), or
  64 usage  65 payload mismatch  66 no record  69 store failure
  70 corrupt record/internal  74 outcome not recorded  75 in progress
  76 claim lost or not refreshable (COMMAND stopped)  77 unlock refused  78 configuration
  79 duplicate (raise)  126 cannot execute  127 command not found
`

// cli is one invocation of the command, with its environment injected so
// tests can run it in process.
type cli struct {
	stdin          io.Reader
	stdout, stderr io.Writer
	getenv         func(string) string
	environ        func() []string
}

// run runs the command line args (without the program name) and returns the
// exit status.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	c := &cli{stdin: os.Stdin, stdout: stdout, stderr: stderr, getenv: os.Getenv, environ: os.Environ}
	return c.main(ctx, args)
}

func (c *cli) main(ctx context.Context, args []string) int {
	if len(args) == 0 {
		io.WriteString(c.stderr, usageText)
		return exitUsage
	}
	switch args[0] {
	case "run":
		return c.runCmd(ctx, args[1:])
	case "inspect":
		return c.inspectCmd(ctx, args[1:])
	case "unlock":
		return c.unlockCmd(ctx, args[1:])
	case "purge":
		return c.purgeCmd(ctx, args[1:])
	case "ls":
		return c.lsCmd(ctx, args[1:])
	case "stats":
		return c.statsCmd(ctx, args[1:])
	case "key":
		return c.keyCmd(args[1:])
	case "version", "-version", "--version":
		return c.versionCmd(args[1:])
	case "help", "-h", "-help", "--help":
		io.WriteString(c.stdout, usageText)
		return exitOK
	}
	c.errorf("unknown subcommand %q", args[0])
	io.WriteString(c.stderr, "\n"+usageText)
	return exitUsage
}

// errorf prints an "idem: " line on standard error.
func (c *cli) errorf(format string, args ...any) {
	msg := fmt.Sprintf(format, args...)
	if !strings.HasPrefix(msg, "idem: ") {
		msg = "idem: " + msg
	}
	fmt.Fprintln(c.stderr, msg)
	for _, a := range args {
		if err, ok := a.(error); ok {
			if r := remedy(err); r != "" {
				fmt.Fprintln(c.stderr, "idem: "+r)
				return
			}
		}
	}
}

// remedy returns what the user can do about err, when it is a mistake in
// the configuration the message of the error itself does not explain, or
// "".
func remedy(err error) string {
	switch {
	case errors.Is(err, sqlstore.ErrNoTable):
		return "the store's SQL table does not exist: add ?migrate=1 to the store's URL " +
			"(-store or IDEM_STORE; &migrate=1 after other parameters) to create it"
	case errors.Is(err, sqlstore.ErrNoSchema):
		return "the schema (MySQL: the database) of the store's table=SCHEMA.TABLE does not exist: " +
			"migrate=1 creates the table, not its schema; create the schema or name another"
	}
	var me *MissingError
	if errors.As(err, &me) {
		return "add ?" + me.Param + "=1 to the store's URL (-store or IDEM_STORE; &" + me.Param +
			"=1 after other parameters) to create it"
	}
	return ""
}

// newFlagSet returns a flag set for a subcommand with a usage message.
func (c *cli) newFlagSet(name, synopsis, about string) *flag.FlagSet {
	fs := flag.NewFlagSet("idem "+name, flag.ContinueOnError)
	fs.SetOutput(c.stderr)
	fs.Usage = func() {
		fmt.Fprintf(c.stderr, "Usage: %s\n\n%s\nFlags:\n", synopsis, about)
		fs.PrintDefaults()
	}
	return fs
}

// parse parses args into fs; done is true when the caller must return code
// (help was asked for, or the flags were bad).
func parse(fs *flag.FlagSet, args []string) (code int, done bool) {
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return exitOK, true
		}
		return exitUsage, true
	}
	return 0, false
}

// parseNoArgs is parse for a subcommand that takes flags only: arguments
// left over are a usage error.
func (c *cli) parseNoArgs(fs *flag.FlagSet, args []string) (code int, done bool) {
	if code, done := parse(fs, args); done {
		return code, true
	}
	if fs.NArg() > 0 {
		c.errorf("%s: unexpected arguments %q", fs.Name(), fs.Args())
		return exitUsage, true
	}
	return 0, false
}

// keyFlags are the flags every subcommand that names a key shares.
type keyFlags struct {
	store         string
	key           string
	tenant, scope string
	requireSecret bool
}

func (c *cli) addStoreFlag(fs *flag.FlagSet, dst *string) {
	def := c.getenv("IDEM_STORE")
	help := "`URL` of the store where records live: file:DIR, redis://..., redis-cluster://..., dynamodb://TABLE?..., postgres://..., mysql://..., sqlite://PATH, nats://HOST:PORT/BUCKET, mem:"
	if def == "" {
		help += " (default $IDEM_STORE, else file:" + defaultStoreDir() + ")"
	}
	fs.StringVar(dst, "store", def, help)
}

func (c *cli) addKeyFlags(fs *flag.FlagSet, k *keyFlags) {
	c.addStoreFlag(fs, &k.store)
	fs.StringVar(&k.key, "key", "", "the idempotency key (required); only its hash is stored")
	fs.StringVar(&k.tenant, "tenant", "", "tenant mixed into the storage key")
	fs.StringVar(&k.scope, "scope", "", "scope (operation name) mixed into the storage key")
	fs.BoolVar(&k.requireSecret, "require-secret", false, "refuse to run unless IDEM_SECRET is set")
}

// guardOptions returns the options that decide storage keys: namespace and
// secret. code is non-zero when they are unusable.
func (c *cli) guardOptions(k *keyFlags) (opts []idem.Option, code int) {
	if k.key == "" {
		c.errorf("-key is required")
		return nil, exitUsage
	}
	opts = append(opts, idem.WithNamespace(k.tenant, k.scope))
	secret := c.getenv("IDEM_SECRET")
	var previous [][]byte
	if p := c.getenv("IDEM_PREVIOUS_SECRETS"); p != "" {
		if secret == "" {
			c.errorf("IDEM_PREVIOUS_SECRETS is set but IDEM_SECRET is not: rotating needs the active secret")
			return nil, exitConfig
		}
		for _, s := range strings.Split(p, ",") {
			previous = append(previous, []byte(s))
		}
	}
	if secret != "" {
		opts = append(opts, idem.WithSecret([]byte(secret), previous...))
	}
	if k.requireSecret {
		if secret == "" {
			c.errorf("-require-secret: IDEM_SECRET is not set")
			return nil, exitConfig
		}
		opts = append(opts, idem.RequireSecret())
	}
	return opts, 0
}

// storageKey opens nothing: it derives the storage key of k under its
// namespace and secret.
func (c *cli) storageKey(st storekit.Store, k *keyFlags, extra ...idem.Option) (*idem.Guard[outcome], string, int) {
	opts, code := c.guardOptions(k)
	if code != 0 {
		return nil, "", code
	}
	g, err := idem.New[outcome](st, append(opts, extra...)...)
	if err != nil {
		c.errorf("%s", flagMessage(err))
		return nil, "", exitUsage
	}
	sk, err := guardinfo.StorageKey(g, k.key)
	if err != nil {
		c.errorf("-key: %v", err)
		return nil, "", exitUsage
	}
	return g, sk, 0
}

// exitFor maps an error from the library or a store to an exit status.
func exitFor(err error) int {
	switch {
	case errors.Is(err, idem.ErrPayloadMismatch):
		return exitMismatch
	case errors.Is(err, storekit.ErrNotFound):
		return exitNoRecord
	case errors.Is(err, idem.ErrInvalidKey), errors.Is(err, idem.ErrInvalidOption), errors.Is(err, idem.ErrInvalidPayload):
		return exitUsage
	case errors.Is(err, idem.ErrCorruptRecord),
		errors.Is(err, idem.ErrResultUnavailable), errors.Is(err, idem.ErrPreviousFailure):
		return exitSoftware
	case errors.Is(err, idem.ErrLostOwnership):
		return exitLost
	case errors.Is(err, idem.ErrNotRecorded), errors.Is(err, idem.ErrOutcomeUnknown):
		return exitNotRecorded
	case errors.Is(err, idem.ErrInProgress):
		return exitInProgress
	case errors.Is(err, idem.ErrDuplicate):
		return exitDuplicate
	case errors.Is(err, sqlstore.ErrNoTable), errors.Is(err, sqlstore.ErrNoSchema):
		return exitConfig // migrate=1 not given, or table= in a schema that does not exist (see remedy)
	}
	var me *MissingError
	if errors.As(err, &me) {
		return exitConfig // create=1 or migrate=1 not given (see remedy)
	}
	var se *idem.StoreError
	if errors.As(err, &se) {
		return exitUnavailable
	}
	return exitUnavailable
}

// sizeFlag is a byte count flag accepting suffixes: 512, 64KiB, 1MiB, 1M.
type sizeFlag struct {
	n   int64
	set bool
}

func (s *sizeFlag) String() string {
	if s == nil || !s.set {
		return ""
	}
	return strconv.FormatInt(s.n, 10)
}

func (s *sizeFlag) Set(v string) error {
	n, err := parseSize(v)
	if err != nil {
		return err
	}
	s.n, s.set = n, true
	return nil
}

func parseSize(v string) (int64, error) {
	t := strings.TrimSpace(v)
	mult := int64(1)
	lower := strings.ToLower(t)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{
		{"gib", 1 << 30}, {"mib", 1 << 20}, {"kib", 1 << 10},
		{"gb", 1 << 30}, {"mb", 1 << 20}, {"kb", 1 << 10},
		{"g", 1 << 30}, {"m", 1 << 20}, {"k", 1 << 10}, {"b", 1},
	} {
		if strings.HasSuffix(lower, u.suffix) {
			t, mult = strings.TrimSpace(t[:len(t)-len(u.suffix)]), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(t, 10, 64)
	if err != nil || n < 0 {
		return 0, fmt.Errorf("invalid size %q (want a byte count like 4096, 64KiB or 1MiB)", v)
	}
	if n > (1<<40)/mult {
		return 0, fmt.Errorf("size %q is too large", v)
	}
	return n * mult, nil
}

// formatMs formats Unix milliseconds as an RFC 3339 time with milliseconds,
// in UTC; 0 is "".
func formatMs(ms int64) string {
	if ms == 0 {
		return ""
	}
	return time.UnixMilli(ms).UTC().Format("2006-01-02T15:04:05.000Z07:00")
}

// optionFlags names the flag or environment variable behind each Guard
// option the command sets, so that a rejected option is reported in the
// shell user's terms rather than as a Go option name.
var optionFlags = map[string]string{
	"WithTTL":           "-ttl",
	"WithTakeoverAfter": "-takeover-after",
	"WithHeartbeat":     "-heartbeat",
	"OnDuplicate":       "-on-duplicate",
	"OnFailure":         "-on-failure",
	"WithNamespace":     "-tenant/-scope",
	"WithSecret":        "IDEM_SECRET/IDEM_PREVIOUS_SECRETS",
	"RequireSecret":     "-require-secret",
}

// flagMessage is err as a shell user should read it: every
// *storekit.OptionError of the command's own options becomes "-flag: reason",
// joined by "; ".
func flagMessage(err error) string {
	var msgs []string
	var walk func(error)
	walk = func(e error) {
		if oe, ok := e.(*storekit.OptionError); ok {
			if f, ok := optionFlags[oe.Option]; ok {
				msgs = append(msgs, f+": "+oe.Reason)
				return
			}
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, e := range j.Unwrap() {
				walk(e)
			}
			return
		}
		msgs = append(msgs, e.Error())
	}
	walk(err)
	return strings.Join(msgs, "; ")
}
