package otelidem_test

import "github.com/idem-go/idem/stores/memstore"

// mustMem returns a memory store for a test; the options are the test's
// own and valid, so an error is a bug in the test.
func mustMem(opts ...memstore.Option) *memstore.Store {
	s, err := memstore.New(opts...)
	if err != nil {
		panic(err)
	}
	return s
}
