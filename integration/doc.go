// Package integration holds tests that need several stores at once: the
// linearizability checks of every store against its real backend, and
// tests of packages built on the stores (such as idemhttp) run on more than
// one of them. It is a module of its own so that the stores' dependencies
// meet only here.
//
// It has no API and is never imported: it exists for its tests.
package integration
