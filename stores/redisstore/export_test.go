package redisstore

// Encode exposes the record encoder to the tests.
var Encode = encode
