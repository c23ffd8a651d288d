package redisstore

// Encode exposes the record encoder to the tests.
var Encode = encode

// ClaimValue exposes the fresh-claim value to the tests.
var ClaimValue = claimValue
