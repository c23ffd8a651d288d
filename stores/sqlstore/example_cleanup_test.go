package sqlstore_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/idem-go/idem/stores/sqlstore"
)

// The store removes expired rows by itself, here about every ten seconds;
// Close stops that (the *sql.DB stays open). An interval that is not
// positive is refused by New.
func ExampleWithCleanup() {
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithCleanup(10*time.Second))
	if err != nil {
		log.Fatal(err)
	}
	defer store.Close()

	_, err = sqlstore.New(db, sqlstore.Postgres, sqlstore.WithCleanup(0))
	fmt.Println(errors.Is(err, storekit.ErrInvalidOption))
	// Output: true
}

// A job of your own removes the expired rows: the store runs no clean-up,
// and the job calls Purge, which deletes in batches.
func ExampleWithoutCleanup() {
	ctx := context.Background()
	db, err := sql.Open("pgx", "postgres://postgres@127.0.0.1:5432/test?sslmode=disable")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	store, err := sqlstore.New(db, sqlstore.Postgres, sqlstore.WithoutCleanup())
	if err != nil {
		log.Fatal(err)
	}
	for range time.Tick(time.Minute) {
		n, err := store.Purge(ctx)
		log.Printf("purged %d expired rows: %v", n, err)
	}
}
