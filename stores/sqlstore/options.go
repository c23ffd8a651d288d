package sqlstore

import (
	"fmt"
	"log/slog"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/idem-go/idem/storekit"
)

// Dialect selects the SQL spoken to the database.
type Dialect int

// Dialects. The zero Dialect is invalid.
const (
	// Postgres is PostgreSQL (tested with 15), through a database/sql
	// driver such as github.com/jackc/pgx/v5/stdlib.
	Postgres Dialect = iota + 1
	// MySQL is MySQL or MariaDB (tested with MariaDB 10.11) with InnoDB,
	// through github.com/go-sql-driver/mysql.
	MySQL
	// SQLite is SQLite 3.42 or later, through a pure-Go driver such as
	// modernc.org/sqlite (no cgo), on a file in WAL mode that the
	// processes of one host share (see SQLiteDSNParams).
	SQLite
)

func (d Dialect) String() string {
	switch d {
	case Postgres:
		return "postgres"
	case MySQL:
		return "mysql"
	case SQLite:
		return "sqlite"
	default:
		return fmt.Sprintf("Dialect(%d)", int(d))
	}
}

// Defaults of the options.
const (
	DefaultTable     = "idempotency_keys"
	DefaultRetention = time.Minute
)

// Column limits, the same in every dialect (MySQL's VARCHAR sizes; the
// store checks them before any statement so that no value is truncated).
// MaxKeyLen limits the storage key, the key the store is given: a Guard's
// storage keys are 69 bytes whatever the caller's key (see
// storekit.StorageKeyPrefix), so only a key passed to the Store's methods
// directly can exceed it.
const (
	MaxTenantLen  = 64
	MaxScopeLen   = 255
	MaxKeyLen     = 255
	MaxNonceLen   = 64
	MaxPayloadLen = 255
	MaxOwnerLen   = 255 // a claim's owner (storekit.FormatOwner)
	maxIdentLen   = 48  // leaves room for the "_expires_idx" suffix within 63 bytes
)

// Option configures a Store. New checks every option and reports each
// invalid one as an *storekit.OptionError matching storekit.ErrInvalidOption.
type Option func(*config)

type config struct {
	storekit.Options // Retention
	table            string
	logger           *slog.Logger // nil: slog.Default()
	claimCommit      bool         // WithClaimCommit
}

var identRE = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

// validTable reports why name is not a usable table name ("" if it is): an
// identifier of letters, digits and underscores, optionally behind a schema
// ("schema.table"), each part at most 48 bytes.
func validTable(name string) string {
	parts := strings.Split(name, ".")
	if len(parts) > 2 {
		return "more than one dot"
	}
	for _, p := range parts {
		switch {
		case p == "":
			return "empty identifier"
		case len(p) > maxIdentLen:
			return fmt.Sprintf("identifier %q longer than %d bytes", p, maxIdentLen)
		case !identRE.MatchString(p):
			return fmt.Sprintf("identifier %q is not letters, digits and underscores", p)
		}
	}
	return ""
}

// WithTable sets the table name (default "idempotency_keys"). It must be an
// identifier of ASCII letters, digits and underscores not starting with a
// digit, at most 48 bytes, optionally qualified by a schema ("idem.keys");
// it is quoted in every statement, so it is case-sensitive.
func WithTable(name string) Option {
	return func(c *config) {
		if why := validTable(name); why != "" {
			c.Invalid("WithTable", "%s", why)
		}
		c.table = name
	}
}

// textProblem says why s cannot be kept in a key column and compared byte
// for byte in both dialects ("" if it can): MySQL's INSERT IGNORE cuts text
// that is not valid UTF-8 at the first bad byte (the error becomes a
// warning), so a row would be written under another value; its PAD SPACE
// collation compares "a" and "a " as equal; PostgreSQL text cannot hold a
// NUL byte.
func textProblem(s string) string {
	switch {
	case !utf8.ValidString(s):
		return "not valid UTF-8"
	case strings.HasSuffix(s, " "):
		return "trailing space"
	case strings.IndexByte(s, 0) >= 0:
		return "NUL byte"
	}
	return ""
}

// WithClaimCommit makes DoTx commit its claim before its transaction
// begins, as it did before it claimed inside the transaction: two commits
// per call (the claim's and the transaction's), a claim that a crash
// leaves behind until the takeover threshold, and a heartbeat while fn
// runs, so that a stopped (SIGSTOP) or unreachable owner is taken over
// after the threshold instead of holding its key for as long as the
// database keeps its session. Without it DoTx commits once (see DoTx).
func WithClaimCommit() Option {
	return func(c *config) { c.claimCommit = true }
}

// WithRetention sets how long past its expiry a row is kept before Purge
// may delete it (default one minute). While the row is there a new claim
// on its key continues its attempt numbers (the fencing token) instead of
// starting again at 1. It must not be negative.
func WithRetention(d time.Duration) Option {
	return func(c *config) {
		c.SetRetention(d)
	}
}
