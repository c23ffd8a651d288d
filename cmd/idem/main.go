// Command idem runs a command at most once per key, across every process and
// host that shares a store, and replays the recorded outcome to every
// duplicate. It is the idem library (github.com/idem-go/idem) for shell
// scripts and cron jobs:
//
//	go install github.com/idem-go/idem/cmd/idem@v0.1.0
//	idem run -store redis://10.0.0.5:6379/0 -key "nightly-invoices-$(date +%F)" -- ./bin/send-invoices
//	idem run -store 'postgres://app@db:5432/app?migrate=1' -key deploy-42 -- ./migrate.sh
//	idem ls -state stale                          # claims whose owner stopped heartbeating
//	idem unlock -key "nightly-invoices-2026-11-22" # release the claim of a run whose host died
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
// The first run of a key claims it, runs COMMAND, and, when COMMAND exits
// 0, records its exit status and standard output; a later run of the key,
// from any host sharing the store, prints the recorded output and exits
// with the recorded status instead of running COMMAND (-ttl, default 24h).
// A failure releases the claim, so the next run runs COMMAND again, unless
// -on-failure lock records it. A duplicate run while the first one runs
// exits 75 (-on-duplicate return), or waits for it (-on-duplicate wait).
// While COMMAND runs, idem heartbeats its claim; a claim whose heartbeat is
// older than -takeover-after (default 30s) is taken over by the next run,
// and an owner that loses its claim stops COMMAND and exits 76. COMMAND
// gets the claim's fencing token in IDEM_FENCING_TOKEN.
//
// KEY is hashed before it reaches the store (an HMAC under IDEM_SECRET when
// it is set; IDEM_PREVIOUS_SECRETS while rotating it). -payload names the
// run's inputs: a later run of the key with another -payload exits 65.
// "idem key NAME ARG..." prints the key idem.Key(NAME, ARG...) returns, so
// a shell script and a Go service can share keys.
//
// -store (default: IDEM_STORE, else a file store in the user cache
// directory) selects where records live: file:/path/to/dir, redis://,
// rediss://, redis-cluster://, dynamodb://TABLE, postgres://, mysql://,
// sqlite://PATH, nats://host:port/BUCKET, mem:.
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
//
// Each subcommand, the store URLs and their parameters, signals, heartbeats
// and takeover, secrets and listing are described in [docs/cli.md].
//
// [docs/cli.md]: https://github.com/idem-go/idem/blob/main/docs/cli.md
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
