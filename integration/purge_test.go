package integration

import (
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
	"github.com/idem-go/idem/stores/storetest"
)

// TestPurgeConformance runs storetest's clean-up checks on real time on
// every store that cleans up after itself, opened with retention 0 (as
// TestLinearizable opens them), so that Purge has expired records to race
// with: the stores' own conformance runs keep their default retention of
// a minute, in which nothing expires past retention. On PostgreSQL and
// MySQL it runs them again with a retention of 2s, which checks that
// Purge keeps a record until its retention has passed on the server's
// clock.
func TestPurgeConformance(t *testing.T) {
	for _, b := range backends {
		if !b.cleans || b.name == "mysql-procedure" { // its Purge is mysql's
			continue
		}
		t.Run(b.name, func(t *testing.T) {
			t.Parallel()
			storetest.RunPurge(t, func(t *testing.T) storekit.Store { return b.open(t) },
				storetest.WithRetention(0), storetest.WithClockSkew(100*time.Millisecond))
		})
	}
	const retention = 2 * time.Second
	for _, d := range []sqlstore.Dialect{sqlstore.Postgres, sqlstore.MySQL} {
		t.Run(d.String()+"-retention", func(t *testing.T) {
			t.Parallel()
			storetest.RunPurge(t, func(t *testing.T) storekit.Store {
				return openSQLOn(t, sqlDB(t, d), d, sqlstore.WithRetention(retention))
			}, storetest.WithRetention(retention), storetest.WithClockSkew(100*time.Millisecond))
		})
	}
}
