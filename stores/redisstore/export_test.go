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

// RemembersFresh reports whether the store holds the value of the fresh
// claim by nonce (the completion's fast path).
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
// and reports whether the store completes key's fresh claims with SET ...
// IFEQ.
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
	return s.clock(ctx, s.Key(key), time.Now()) != nil, nil
}
