package redisstore

// Encode exposes the record encoder to the tests.
var Encode = encode

// ClaimValue exposes the fresh-claim value to the tests.
var ClaimValue = claimValue

// CompleteSHA is the SHA1 the complete script is run with (EVALSHA).
var CompleteSHA = scriptComplete.Hash()
