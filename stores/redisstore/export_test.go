package redisstore

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
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

// ReadServerClock reads the server's version and clock now (as the store
// does in the background at a completion) and reports whether the store
// completes fresh claims with SET ... IFEQ.
func (s *Store) ReadServerClock(ctx context.Context) (bool, error) {
	c, ok := s.client.(*redis.Client)
	if !ok {
		return false, nil
	}
	clk, err := readServerClock(ctx, c)
	if err != nil {
		return false, err
	}
	s.srvClock.Store(clk)
	return s.clock(time.Now()) != nil, nil
}
