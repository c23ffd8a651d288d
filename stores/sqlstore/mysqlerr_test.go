package sqlstore

import (
	"errors"
	"fmt"
	"os/exec"
	"strings"
	"testing"

	"github.com/go-sql-driver/mysql"
)

// The MySQL driver's errors are classified without importing the driver:
// these are its real error values.
func TestMySQLErrorsWithoutTheDriver(t *testing.T) {
	state := func(s string) (b [5]byte) { copy(b[:], s); return b }
	deadlock := &mysql.MySQLError{Number: 1213, SQLState: state("40001"), Message: "Deadlock found"}
	lockWait := &mysql.MySQLError{Number: 1205, SQLState: state("HY000"), Message: "Lock wait timeout"}
	tooLong := &mysql.MySQLError{Number: 1406, SQLState: state("22001"), Message: "Data too long"}
	packet := &mysql.MySQLError{Number: 1153, SQLState: state("08S01"), Message: "Got a packet bigger than 'max_allowed_packet' bytes"}
	dup := &mysql.MySQLError{Number: 1062, SQLState: state("23000"), Message: "Duplicate entry"}
	for _, c := range []struct {
		err                  error
		transient, permanent bool
		retryable            bool
	}{
		{deadlock, true, false, true},
		{fmt.Errorf("claim: %w", deadlock), true, false, true},
		{errors.Join(errors.New("x"), lockWait), true, false, false},
		{tooLong, false, true, false},
		{packet, false, true, false},
		{fmt.Errorf("exec: %w", mysql.ErrPktTooLarge), false, true, false},
		{dup, false, false, false},
		{errors.New("Error 1213 (40001): not a driver error"), false, false, false},
	} {
		if got := transient(c.err); got != c.transient {
			t.Errorf("transient(%v) = %v", c.err, got)
		}
		if got := permanent(c.err); got != c.permanent {
			t.Errorf("permanent(%v) = %v", c.err, got)
		}
		if got := retryable(c.err); got != c.retryable {
			t.Errorf("retryable(%v) = %v", c.err, got)
		}
	}
}

// A PostgreSQL program links no MySQL driver, and a MySQL program no pgx:
// the store's own code imports neither.
func TestNoDriverLinked(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Skipf("go list: %v: %s", err, out)
	}
	for _, dep := range strings.Fields(string(out)) {
		if strings.HasPrefix(dep, "github.com/go-sql-driver/") || strings.HasPrefix(dep, "github.com/jackc/") {
			t.Errorf("package sqlstore depends on %s", dep)
		}
	}
}
