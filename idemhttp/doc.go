// Package idemhttp is net/http middleware for the Idempotency-Key request
// header (IETF draft-ietf-httpapi-idempotency-key-header), built on an idem
// Guard, so it holds across processes and machines that share a store.
//
//	m, err := idemhttp.New(store,
//		idemhttp.WithPrincipal(apiKeyOf), // keys are scoped per caller
//		idemhttp.WithRequired(),
//	)
//	http.Handle("POST /payments", m.Handler(createPayment))
//
// # What a request gets
//
// Requests whose method is not guarded (POST and PATCH by default,
// WithMethods; matched in any case, so "post" is guarded too) pass through
// untouched, as do those a WithSkip function picks, and guarded requests
// without a key unless WithRequired is set. For the others:
//
//   - The first request with a key runs the handler once. It writes to the
//     client directly (http.Flusher, http.Hijacker and
//     http.ResponseController work as without the middleware) while its
//     status, headers and body are recorded.
//   - A later request with the same key and principal, from any process,
//     gets the recorded response back: the same status, the same headers
//     and the same body bytes, plus "Idempotent-Replayed: true".
//   - A request with the same key while the first one runs gets a 409
//     problem with a Retry-After: the Guard's heartbeat interval, or the
//     time left until the first one's claim would go stale if sooner (its
//     heartbeat age is read from the store), in seconds rounded up, at
//     least 1. With WithGuard(idem.OnDuplicate(idem.Wait)) it waits for the
//     first one's response instead, for as long as its own context allows
//     (then 409).
//
// Every refusal is an RFC 9457 problem document (application/problem+json)
// whose type names one of the Problem constants:
//
//	400 ProblemKeyMissing           no key, WithRequired set
//	400 ProblemKeyInvalid           malformed key, or longer than MaxKeyLen
//	401 ProblemUnauthorized         the WithPrincipal function returned an error or ""
//	409 ProblemInProgress           the first request with the key still runs
//	409 ProblemAlreadyProcessed     the key was used, policy idem.Raise
//	409 ProblemResponseNotRecorded  processed, but the response was too large to keep
//	413 ProblemBodyTooLarge         request body over WithMaxBody (or an outer http.MaxBytesReader)
//	422 ProblemKeyReused            same key, another request (fingerprint mismatch)
//	500 ProblemInternal             the record cannot be read, or is damaged (idem.ErrCorruptRecord)
//	503 ProblemStoreUnavailable     the store failed; the handler did not run
//
// In each case but the first request, the handler is not run.
//
// # Keys and principals
//
// The key is parsed by ParseKey: a structured-field string, or the bare
// value many clients send. It is never stored raw: the Guard stores a hash
// of the principal's hash and the key (HMAC with idem.WithSecret, given
// through WithGuard; rotating it with idem.WithSecret(new, old) keeps every
// recorded response replayable, see package idem). The principal, from
// WithPrincipal, names who asks (an API key, an account);
// two principals using the same key never see each other's records. A
// principal function that fails, or returns an empty name, is a 401, so an
// unauthenticated caller cannot use the key space at all.
//
// # Fingerprint
//
// A key names one request: its method (as sent: "post" is not "POST"), its path (escaped form), its query
// string (the raw query, byte for byte: a different query is a different
// request), the SHA-256 of its body, and the values of the headers named
// with WithFingerprintHeaders ("Host" is the request's host, r.Host). Their hash is the Guard's payload, so a
// request that reuses a key with anything else different gets a 422,
// whatever the state of the first one. The body is read once, up to
// WithMaxBody (413 beyond it, before anything is claimed), and the handler
// gets it unchanged.
//
// # What is recorded
//
// The status; the headers the handler set, as they were when the status
// was written; and the body. Headers and body together are recorded up to
// WithMaxRecordedBody. Of the headers, by default, all but:
//
//   - those that name one response, not the operation's outcome: Date,
//     Age, Server-Timing, and request and trace ids (X-Request-Id,
//     Traceparent and the others DefaultReplayHeaders lists). WithReplayHeaders
//     sets which are recorded;
//   - Set-Cookie, unless WithReplaySetCookie;
//   - and, whatever the options say, hop-by-hop headers, those named by
//     Connection, and trailers.
//
// Headers set in front of the middleware (a request id, CORS) are not
// recorded either: the layers in front set them again on each replay.
// Headers the server itself adds (Date, a sniffed Content-Type, a computed
// Content-Length) are added to the replay the same way. A header the
// handler removed (h["Date"] = nil) is removed on replays too.
//
// A record carries its body's length and a CRC-32C checksum: a record
// damaged in the store (bytes lost, added or changed) is never replayed as
// another response; its replays get a 500 ProblemInternal document.
//
// Responses with a status WithRecordStatus refuses (by default 5xx, and
// 408, 425 and 429, which ask for the same request again) are not
// recorded: the claim is released and the next request with the key runs
// the handler again, as the client's retry of a server error expects. A
// hijacked connection is not recorded either, nor is a handler that
// returns without writing anything after its request context ended (its
// client left: an empty 200 is not its answer). A response over the record
// limit is served in full to the first caller and its replays get a
// ProblemResponseNotRecorded document: never a truncated body.
//
// # When the store fails after the handler ran
//
// The first caller's response never waits for the store: once the handler
// has returned, it waits up to about a second for the outcome to be
// recorded (or, for a response that is not recorded, for the claim to be
// released), then ends. The recording goes on in the background, bounded
// by the Guard: it retries the completion until the takeover threshold
// (idem.WithTakeoverAfter), then fences the claim off and records the
// outcome under the new claim if it can (see idem.ErrNotRecorded). A
// retry meanwhile gets a 409 ProblemInProgress while the claim is live,
// then what the recording came to: the response replayed if it was
// recorded after all, or, if it never was and the claim went stale, the
// handler run again. The Guard's Observer sees each step.
//
// # Fencing
//
// The handler's request context carries the claim's fencing token:
// idem.FencingToken(r.Context()).
//
// # Cost
//
// A first request costs two store round trips (claim, complete), a replay
// one, a 409 ProblemInProgress up to two (the claim, unless a request
// with the key runs in the same process, and a read for its Retry-After); requests shorter than the Guard's heartbeat interval send
// no heartbeat. Each guarded request with a key runs the Guard in a
// goroutine of its own (the handler runs in the request's), so that the
// response can end before the recording does.
package idemhttp
