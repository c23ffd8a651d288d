package idemhttp

import (
	"encoding/json"
	"net/http"
	"strconv"
)

// Problem types (RFC 9457 "type" members) of the problem documents the
// middleware writes. Each resolves to its own documentation.
const (
	problemBase = "https://pkg.go.dev/github.com/idem-go/idem/idemhttp#"
	// ProblemKeyMissing (400): the key header is required (WithRequired)
	// and the request has none.
	ProblemKeyMissing = problemBase + "ProblemKeyMissing"
	// ProblemKeyInvalid (400): the key header is malformed or longer than
	// MaxKeyLen bytes.
	ProblemKeyInvalid = problemBase + "ProblemKeyInvalid"
	// ProblemUnauthorized (401): the principal function refused the request.
	ProblemUnauthorized = problemBase + "ProblemUnauthorized"
	// ProblemBodyTooLarge (413): the request body is over WithMaxBody, or
	// over an http.MaxBytesReader set before the middleware.
	ProblemBodyTooLarge = problemBase + "ProblemBodyTooLarge"
	// ProblemInProgress (409): a request with the same key is being
	// processed; retry later (Retry-After says when).
	ProblemInProgress = problemBase + "ProblemInProgress"
	// ProblemAlreadyProcessed (409): the key was used before and the Guard's
	// duplicate policy is idem.Raise, so the response is not replayed.
	ProblemAlreadyProcessed = problemBase + "ProblemAlreadyProcessed"
	// ProblemKeyReused (422): the key was used with another request (method,
	// path, query, body or fingerprinted headers).
	ProblemKeyReused = problemBase + "ProblemKeyReused"
	// ProblemResponseNotRecorded (409): the request was processed, but its
	// response was larger than WithMaxRecordedBody and was not kept, so it
	// cannot be replayed. The member "original_status" holds its status.
	// Retrying will not help: the operation happened once.
	ProblemResponseNotRecorded = problemBase + "ProblemResponseNotRecorded"
	// ProblemStoreUnavailable (503): the idempotency store failed before
	// the handler ran; the request was not processed and may be retried.
	ProblemStoreUnavailable = problemBase + "ProblemStoreUnavailable"
	// ProblemInternal (500): the stored record could not be read, or is
	// damaged (it fails its length or checksum: idem.ErrCorruptRecord; it
	// is never replayed as another response), or it holds a stored
	// failure (written by a Guard with idem.OnFailure(idem.Lock) on the
	// same store and namespace; New refuses that policy itself).
	ProblemInternal = problemBase + "ProblemInternal"
)

// problem is an RFC 9457 problem details object.
type problem struct {
	Type           string `json:"type"`
	Title          string `json:"title"`
	Status         int    `json:"status"`
	Detail         string `json:"detail,omitempty"`
	OriginalStatus int    `json:"original_status,omitempty"`
}

// writeProblem writes p as application/problem+json. retryAfter, when
// positive, is sent as a Retry-After header (seconds).
func writeProblem(w http.ResponseWriter, p problem, retryAfter int) {
	b, _ := json.Marshal(p) // strings and ints only: cannot fail
	h := w.Header()
	h.Set("Content-Type", "application/problem+json")
	h.Set("Content-Length", strconv.Itoa(len(b)+1))
	h.Set("Cache-Control", "no-store")
	if retryAfter > 0 {
		h.Set("Retry-After", strconv.Itoa(retryAfter))
	}
	w.WriteHeader(p.Status)
	_, _ = w.Write(append(b, '\n'))
}
