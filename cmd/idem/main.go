// Command idem runs a command at most once per key, across every process and
// host that shares a store, and replays the recorded outcome to every
// duplicate. It is the idem library (github.com/idem-go/idem) for shell
// scripts and cron jobs.
//
// Usage:
//
//	idem run [flags] -key KEY [--] COMMAND [ARG...]
//	idem inspect [flags] -key KEY|-storage-key SK
//	idem unlock [flags] -key KEY|-storage-key SK [-force]
//	idem ls [flags] [-state STATE] [-json] [-limit N]
//	idem stats [flags] [-json]
//	idem purge [flags]
//	idem key [-s] NAME [ARG...]
//	idem version
//
// Run "idem SUBCOMMAND -h" for the flags of each subcommand.
//
// # idem run
//
// The first run of a key claims it in the store, runs COMMAND, and, when
// COMMAND succeeds (exit status 0), records its exit status and the first
// -max-output bytes of its standard output (default 1 MiB; 256 KiB on
// DynamoDB, whose items are limited to 400 KB). A failure is recorded the
// same way only under -on-failure lock; by default it releases the claim
// and nothing is recorded (see below).
// Standard output is streamed as the command writes it and captured at the
// same time; standard error is passed through and never recorded; standard
// input is the command's own.
//
// A later run of the same key, from any process or host sharing the store,
// does not run COMMAND again while the record is kept (-ttl, default 24h):
// it prints the recorded standard output and exits with the recorded exit
// status (a replay). When the captured output was truncated, the replay
// prints the captured part and says so on standard error.
//
// While the first run is still going, a duplicate run does what
// -on-duplicate says:
//
//	return  (default) exit 75 at once (see -in-progress-exit)
//	raise   exit 75 while in progress, and 79 for a key that already completed,
//	        instead of replaying it
//	wait    wait for the running one to finish (bounded by -wait-timeout), then
//	        replay its outcome; if it failed and was unlocked, or its owner died,
//	        run COMMAND here instead
//
// A non-zero exit status is a failure. With -on-failure unlock (default) the
// claim is released, so the next run of the key runs COMMAND again; with
// -on-failure lock the failure is recorded like a success, and every replay
// prints the recorded output and exits with the recorded non-zero status until
// the record expires. A command that cannot be started (not found, not
// executable) is never recorded: the claim is released whatever the policy.
//
// A command killed by a signal has exit status 128 + the signal number, as in
// the shell. A command stopped because of -timeout has failed, and the
// failure policy decides whether it is recorded. One stopped because idem
// itself received SIGINT, SIGTERM or SIGHUP has not: the run was given up,
// so its claim is released and nothing is recorded, whatever -on-failure
// says, and the next run of the key runs COMMAND again. (A command that
// exits 0 before the signal stops it has succeeded and is recorded.)
//
// # Ownership, heartbeats and takeover
//
// While COMMAND runs, idem refreshes its claim every -heartbeat (default 5s,
// or a third of -takeover-after if shorter). A claim whose heartbeat is older
// than -takeover-after (default 30s) is stale: the next run takes it over and
// runs COMMAND again. That is how a run whose host crashed or whose idem
// process was killed with SIGKILL is recovered. The clocks of hosts sharing a
// file or DynamoDB store may disagree by up to -takeover-after minus
// -heartbeat before a live claim looks stale; Redis decides with its own
// clock.
//
// COMMAND gets the claim's fencing token in the environment variable
// IDEM_FENCING_TOKEN: 1 for the first claim of a key, one more for every
// takeover or re-run while the record is kept. A downstream system that
// remembers the highest token it has seen can refuse a stale owner's writes.
// IDEM_STORAGE_KEY holds the storage key (a hash, never the key itself).
// IDEM_SECRET and IDEM_PREVIOUS_SECRETS are removed from COMMAND's environment.
//
// If the claim is lost while COMMAND runs (a heartbeat finds that another run
// took it over, or that the record was deleted with "idem unlock -force"),
// idem stops COMMAND and exits 76. Stopping means SIGTERM to COMMAND's process
// group, then SIGKILL after -kill-grace (default 10s). COMMAND runs in its own
// process group so that the processes it starts are stopped with it; on Linux
// it is also killed (SIGKILL) if the idem process dies, so a killed idem does
// not leave an orphaned COMMAND running alongside the run that takes over.
// Processes that COMMAND starts in yet other process groups are its own
// business.
//
// If heartbeats fail instead (the store cannot be reached from this host),
// the Guard cancels the run once no refresh has succeeded for -takeover-after
// minus half a -heartbeat (counted from the start of the last claim or
// heartbeat that succeeded, which the store applied no earlier), and tells
// idem how long is left before another host could find the claim stale.
// idem then stops COMMAND the same way, tries to release the claim, and
// exits 76: the two runs must not overlap. The SIGKILL comes after
// -kill-grace or half of what was left, whichever is shorter, so that
// COMMAND is gone before the claim can be taken over (given clock skew
// between hosts below the other half).
//
// # Keys, namespaces, secrets and payloads
//
// KEY is hashed (SHA-256 over -tenant, -scope and KEY) before it reaches the
// store, so the store never holds it. When the environment variable
// IDEM_SECRET is set, the hash is an HMAC under it, and nobody without the
// secret can tell which keys were used; every host must use the same secret
// to share keys. -require-secret refuses to run without IDEM_SECRET
// (production mode). To rotate the secret, set the old one in
// IDEM_PREVIOUS_SECRETS (comma-separated) beside the new IDEM_SECRET: a key
// recorded under an old secret is found and replayed, not run again (see
// idem.WithSecret for the three-step procedure across hosts).
//
// -payload names the inputs of the run: its hash is recorded with the claim,
// and a later run of the same key with a different -payload exits 65 rather
// than replaying an outcome that was computed for other inputs. A run without
// -payload matches only records made without one.
//
// "idem key NAME ARG..." prints a canonical key for NAME and the arguments,
// each parsed as JSON (or, with -s, taken as strings): the same key the Go
// function idem.Key(NAME, ARG...) returns for the same values, so a shell
// script and a Go service can share keys:
//
//	idem run -key "$(idem key nightly-report -s "$(date +%F)")" -- ./report.sh
//
// # Stores
//
// -store (default: the IDEM_STORE environment variable, else a file store
// in the user cache directory, e.g. ~/.cache/idem/records) selects where
// records live. Only idem run creates a file store's directory; the other
// subcommands read a directory that does not exist as an empty store and
// create nothing.
//
//	file:/path/to/dir            one file per key; processes on one host
//	redis://[user:pass@]host:port/db?prefix=P
//	rediss://...                 Redis (TLS); hosts sharing one server
//	redis-cluster://host:port?addr=host2:port2&prefix=P
//	                             Redis Cluster; a master with replicas needs
//	                             replica-ack=N (and replica-ack-timeout=D,
//	                             default 100ms) or async-replication=accept
//	dynamodb://TABLE?region=R&endpoint=URL&create=1
//	                             DynamoDB; credentials from the default AWS
//	                             chain (environment, profile, instance role);
//	                             create=1 creates the table if it is missing
//	postgres://user:pass@host:port/db?table=T&migrate=1
//	                             PostgreSQL (pgx driver; its parameters, such
//	                             as sslmode, pass through)
//	mysql://user:pass@host:port/db?table=T&migrate=1
//	                             MySQL or MariaDB (go-sql-driver/mysql; its
//	                             parameters, such as tls, pass through);
//	                             migrate=1 creates the table if it is missing
//	sqlite://PATH?table=T&migrate=1
//	                             a SQLite database file (pure Go driver);
//	                             processes on one host. migrate=1 creates the
//	                             file (in a directory that exists) and the
//	                             table; without it a missing file is an error
//	                             (exit 78), and no file is created
//	nats://[user:pass@]host:port/BUCKET?create=1
//	                             a JetStream KV bucket; create=1 creates it if
//	                             it is missing (without it, a missing bucket
//	                             exits 78). The command starts no clean-up:
//	                             give the bucket a max age, or let a
//	                             long-running natsstore do it
//	mem:[NAME]                   in memory, for tests: nothing outlives the process
//
// Redis URLs take go-redis's query options (dial_timeout, read_timeout,
// ...); prefix is idem's own key prefix. DynamoDB URLs also take pk and sk
// (key attribute names, default pk and sk) and prefix.
//
// # idem inspect
//
// Prints the record of KEY (or of -storage-key SK, as idem ls prints it)
// as one JSON object: state and status (in_progress,
// completed or failed), attempt (the fencing token), started_at,
// heartbeat_at, completed_at and expires_at as RFC 3339 times with _ms twins
// in Unix milliseconds, the heartbeat's age and whether a run now would take
// the claim over (for the given -takeover-after), the payload hash, the
// stored result's size, and the recorded exit status and output size. It
// prints the key as typed and the storage key, never anything else about
// the key; the ownership nonce is not printed. -stdout prints the recorded
// standard output instead. A record that idem run did not write (a Go
// program's call of the same store) has no exit status or output: inspect
// prints its stored result instead, as "result" when it is JSON (the
// Guard's default codec) and as "result_base64" otherwise. Exits 66 when
// there is no live record; when IDEM_SECRET is not set, it adds that
// records written with a secret have other storage keys.
//
// # idem unlock
//
// Releases an in-progress claim so that the next run of KEY runs COMMAND at
// once, without waiting for the claim to go stale: use it after a host died
// mid-run. The release is conditioned on the claim it read, so a run that
// completed in the meantime is never undone (exit 75: look again). The
// record is kept, expired, so fencing tokens keep counting up. If the owner
// is in fact still running, its next heartbeat renews the claim unless a new
// run claimed the key first, in which case the old owner stops its command.
// A completed or failed record is refused (exit 77) unless -force is given;
// -force deletes the record whatever its state (given -key, under
// IDEM_SECRET and each of IDEM_PREVIOUS_SECRETS), so a live owner is told
// at its next heartbeat that it lost the claim, and stops its command. It
// keeps the records of the call's steps, if a Go program's call had any,
// so a new run of the call replays its finished steps instead of running
// them again. Exits 66 when there is no live record.
//
// -storage-key SK names the record by its storage key, as idem ls prints
// it, instead of -key; with -force it deletes that record only (the records
// of its steps, if any, expire).
//
// A steps epoch record (state steps_epoch in idem ls) is refused, with or
// without -force (exit 77): it is not a claim, and releasing or deleting it
// would make its call's finished steps run again.
//
// # idem ls and idem stats
//
// idem ls lists the store's live records, one line each: state, storage
// key, attempt, heartbeat age (in progress) and expiry. The state is
// in_progress, stale (in progress, its heartbeat older than its owner's
// takeover threshold: a run now would take it over), failed, completed, or
// steps_epoch: the record a Go program's call that ran idem.Step keeps
// while it can be retried, naming the generation of its recorded steps.
// Nothing heartbeats a steps epoch; it is never in_progress or stale, and is
// not stuck: it expires with its call, and idem unlock refuses it.
// -state STATE lists only those; -limit N stops after N; -json prints one
// JSON object per line with idem inspect's field names (storage_key,
// status, attempt, heartbeat_age_ms, stale, expires_at, ...) and state.
// idem stats counts the records by state (-json: one object with a count
// per state and the total). A record that cannot be decoded is reported on
// standard error, counted as corrupt, and the command exits 70.
//
// SQL stores read their table in pages of 1000 rows by primary key; files,
// Redis (SCAN on every master), DynamoDB (Scan) and NATS have no index of
// their keys and read their whole keyspace, a page at a time. No listing
// holds a lock that a claim waits for, and a record written meanwhile may
// be listed in its old state or its new one. The records of a call's steps
// are listed too, under their own storage keys.
//
// # idem version
//
// Prints the version of the command's module as installed (go install
// github.com/idem-go/idem/cmd/idem@VERSION), or (devel) for a build from a
// working tree, and the Go version it was built with.
//
// # idem purge
//
// Deletes expired records from a file, SQL or NATS store (-grace keeps them longer:
// purging a record forgets its attempt counter, so the next claim starts
// again at fencing token 1). Redis and DynamoDB expire records natively;
// purge says so and exits 0.
//
// # Exit status
//
// idem run exits with COMMAND's exit status, on a fresh run and on a replay.
// Otherwise:
//
//	64   usage: unknown flag, missing -key or COMMAND, invalid flag value
//	65   payload mismatch: KEY was used with a different -payload
//	66   no live record for KEY (inspect, unlock)
//	69   the store failed or cannot be reached
//	70   corrupt or unreadable record, or an internal error
//	74   COMMAND ran, but its outcome could not be recorded
//	75   in progress: another run holds KEY (-in-progress-exit changes it),
//	     -wait-timeout passed, or unlock found the record changed
//	76   lost ownership: the claim was taken over while COMMAND ran, or could
//	     not be refreshed in time; COMMAND was stopped
//	77   unlock refused: the record is completed or failed and -force was not
//	     given, or it is a steps epoch
//	78   configuration: bad -store, a SQL table or SQLite file that does not
//	     exist (give migrate=1 to create it) or whose schema does not, a NATS
//	     bucket that does not exist (give create=1), unsafe store directory,
//	     -require-secret without IDEM_SECRET
//	79   duplicate under -on-duplicate raise: KEY already completed
//	126  COMMAND could not be executed
//	127  COMMAND was not found
//
// These codes can also be COMMAND's own exit status. When the difference
// matters, idem's own exits always print a line starting "idem:" on standard
// error, and idem inspect tells what is recorded. Cron jobs run on several
// hosts usually want -in-progress-exit 0 -q, so that the hosts that did not
// get the key stay silent.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	code := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	os.Exit(code)
}
