// Package idemgrpc holds the multi-process tests of
// github.com/idem-go/idem/idemgrpc: grpc-go clients retrying through a
// proxy that drops answers, against several server processes sharing a
// file store or Redis, and a server SIGKILLed mid-call and taken over.
// They live in the integration module, which is not published, so that a
// user of idemgrpc does not resolve the file and Redis stores for them.
//
// It has no API: it exists for its tests.
package idemgrpc
