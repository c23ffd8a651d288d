package redisstore

import (
	"context"
	"time"
)

// Encode exposes the record encoder to the tests.
var Encode = encode

// ClaimValue exposes the fresh-claim value to the tests.
var ClaimValue = claimValue

// CompleteSHA is the SHA1 the complete script is run with (EVALSHA).
var CompleteSHA = scriptComplete.Hash()

// SetIfEqSHA is the SHA1 of the script that completes a fresh claim on a
// server whose SET has no IFEQ.
var SetIfEqSHA = scriptSetIfEq.Hash()

// ForgetServerClocks drops the store's readings of the servers' clocks, so
// that the next completion on each server runs the complete script (and
// starts a new reading).
func (s *Store) ForgetServerClocks() { s.clocks.Clear() }

// RemembersFresh reports whether the store holds the value of the fresh
// claim by nonce (for the conditional completion).
func (s *Store) RemembersFresh(nonce string) bool {
	s.freshMu.Lock()
	defer s.freshMu.Unlock()
	_, ok := s.fresh[nonce]
	return ok
}

// SetFresh replaces what the store remembers of the fresh claim of key by
// nonce ("" forgets it).
func (s *Store) SetFresh(key, nonce, value string) {
	if value == "" {
		s.takeFresh(key, nonce)
		return
	}
	s.rememberFresh(key, nonce, value, time.Now())
}

// ReadServerClock reads the version and clock of the server that holds
// key's record now (as the store does in the background at a completion)
// and reports whether the store completes key's fresh claims with the
// native SET ... IFEQ (else, with the clock read, with lua/set_ifeq.lua).
func (s *Store) ReadServerClock(ctx context.Context, key string) (bool, error) {
	node, nc := s.nodeClock(ctx, s.Key(key))
	if node == nil {
		return false, nil
	}
	clk, err := readServerClock(ctx, node)
	if err != nil {
		return false, err
	}
	nc.c.Store(clk)
	c := s.clock(ctx, s.Key(key), time.Now())
	return c != nil && c.ifeq, nil
}

// UseOwnPresence makes the store hold a presence of its own instead of the
// process's (another token, another subscription), as another process
// would. It must be called before Owner.
func (s *Store) UseOwnPresence() { s.ownPresence = true }
