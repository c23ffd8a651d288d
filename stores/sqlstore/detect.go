package sqlstore

import (
	"context"
	"database/sql"
	"reflect"
	"regexp"
	"strings"
)

// driverDialects maps the package of a database/sql driver to the dialect
// of the databases it reaches. A driver not listed (a wrapper, a driver
// of another database) is not judged.
var driverDialects = []struct {
	pkg     string
	dialect Dialect
}{
	{"github.com/jackc/pgx/", Postgres},
	{"github.com/lib/pq", Postgres},
	{"github.com/go-sql-driver/mysql", MySQL},
	{"modernc.org/sqlite", SQLite},
	{"github.com/mattn/go-sqlite3", SQLite},
	{"github.com/ncruces/go-sqlite3", SQLite},
}

// driverDialect returns the dialect of db's driver, by the package that
// declares its type, and the package; ok is false for a driver not
// listed in driverDialects, and for a *sql.DB not made by sql.Open or
// sql.OpenDB (a zero sql.DB, whose Driver method panics). It does no I/O.
func driverDialect(db *sql.DB) (d Dialect, pkg string, ok bool) {
	defer func() {
		if recover() != nil {
			d, pkg, ok = 0, "", false
		}
	}()
	t := reflect.TypeOf(db.Driver())
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == nil {
		return 0, "", false
	}
	pkg = t.PkgPath()
	for _, dd := range driverDialects {
		if pkg == strings.TrimSuffix(dd.pkg, "/") || strings.HasPrefix(pkg, dd.pkg) || strings.HasPrefix(pkg, dd.pkg+"/") {
			return dd.dialect, pkg, true
		}
	}
	return 0, pkg, false
}

// mysqlVersion is the start of MySQL's and MariaDB's version() text
// ("8.0.36", "10.11.6-MariaDB-...").
var mysqlVersion = regexp.MustCompile(`^\d+\.\d+\.\d+`)

// serverDialect asks the database which it is: version() names PostgreSQL,
// or starts with MySQL's or MariaDB's version number; a database without
// version() that answers sqlite_version() is SQLite. ok is false when the
// answers name none of them (a database that speaks one of the dialects
// without being it, or a failed query): the server is not judged.
func serverDialect(ctx context.Context, db *sql.DB) (d Dialect, version string, ok bool) {
	if err := db.QueryRowContext(ctx, "SELECT version()").Scan(&version); err == nil {
		switch {
		case strings.HasPrefix(version, "PostgreSQL "):
			return Postgres, version, true
		case mysqlVersion.MatchString(version):
			return MySQL, version, true
		}
		return 0, version, false
	}
	if ctx.Err() != nil {
		return 0, "", false
	}
	if err := db.QueryRowContext(ctx, "SELECT sqlite_version()").Scan(&version); err == nil && mysqlVersion.MatchString(version) {
		return SQLite, "SQLite " + version, true
	}
	return 0, "", false
}

// dialectMismatch says why dialect given is wrong for a database that
// is actual, as by tells: what the database is and the dialect to use.
func dialectMismatch(given, actual Dialect, by string) string {
	return "dialect " + given.String() + " on a " + dialectDatabase(actual) + " database (" + by + "): use sqlstore." + dialectName(actual)
}

// dialectName is d's constant as Go spells it.
func dialectName(d Dialect) string {
	switch d {
	case Postgres:
		return "Postgres"
	case MySQL:
		return "MySQL"
	case SQLite:
		return "SQLite"
	}
	return d.String()
}

// dialectDatabase names the databases d speaks to.
func dialectDatabase(d Dialect) string {
	switch d {
	case Postgres:
		return "PostgreSQL"
	case MySQL:
		return "MySQL or MariaDB"
	case SQLite:
		return "SQLite"
	}
	return d.String()
}
