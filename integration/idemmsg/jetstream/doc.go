// Package jetstream holds the redelivery torture tests of
// github.com/idem-go/idem/idemmsg/jetstream: consumer processes sharing a file
// store, SIGKILLed inside handlers, acks dropped. They live in the
// integration module, which is not published, so that a user of idemmsg
// does not resolve the file store for them.
//
// It has no API: it exists for its tests.
package jetstream
