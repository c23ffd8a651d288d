package sqlstore

import (
	"errors"
	"reflect"
	"strings"
)

// The store classifies driver errors without importing a driver, so a
// PostgreSQL user does not link the MySQL driver (and a MySQL user not
// pgx). PostgreSQL drivers expose SQLState() on their errors; the MySQL
// driver (github.com/go-sql-driver/mysql) has no such method, so its
// *MySQLError is recognised by its type's package and name and read through
// its exported Number and SQLState fields.

const mysqlDriverPkg = "github.com/go-sql-driver/mysql"

// mysqlServerError returns the server error number and SQLSTATE of the
// first *mysql.MySQLError in err's chain.
func mysqlServerError(err error) (number uint64, state string, ok bool) {
	var found bool
	walk(err, func(e error) bool {
		v := reflect.ValueOf(e)
		if v.Kind() != reflect.Pointer || v.IsNil() {
			return false
		}
		v = v.Elem()
		t := v.Type()
		if t.Kind() != reflect.Struct || t.Name() != "MySQLError" || t.PkgPath() != mysqlDriverPkg {
			return false
		}
		n, s := v.FieldByName("Number"), v.FieldByName("SQLState")
		if !n.IsValid() || !n.CanUint() {
			return false
		}
		number = n.Uint()
		if s.IsValid() && s.Kind() == reflect.Array {
			b := make([]byte, s.Len())
			for i := range b {
				b[i] = byte(s.Index(i).Uint())
			}
			state = string(b)
		}
		found = true
		return true
	})
	return number, state, found
}

// mysqlPacketTooLarge reports the MySQL driver's ErrPktTooLarge (a
// statement over max_allowed_packet, refused before it is sent) in err's
// chain. The driver's sentinel is matched by its text.
func mysqlPacketTooLarge(err error) bool {
	return walk(err, func(e error) bool {
		return strings.HasPrefix(e.Error(), "packet for query is too large")
	})
}

// walk calls f on every error in err's tree, depth first, until f returns
// true; it reports whether one did.
func walk(err error, f func(error) bool) bool {
	if err == nil {
		return false
	}
	if f(err) {
		return true
	}
	switch u := err.(type) {
	case interface{ Unwrap() []error }:
		for _, e := range u.Unwrap() {
			if walk(e, f) {
				return true
			}
		}
		return false
	default:
		return walk(errors.Unwrap(err), f)
	}
}
