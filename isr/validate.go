package isr

import (
	"strconv"
	"strings"
	"time"
)

// Cancellation reasons, as DynamoDB names them: TxError.Reasons holds one
// per item of a refused transaction, on every table.
const (
	ReasonNone                   = "None"
	ReasonConditionalCheckFailed = "ConditionalCheckFailed"
	ReasonTransactionConflict    = "TransactionConflict"
)

// LeaseLost is the refusal of op on pk when LOCK does not carry the
// caller's token or is no longer held: a *TxError matching ErrLeaseLost.
func LeaseLost(op, pk string) error {
	return &TxError{Op: op, PK: pk, Reasons: []string{ReasonConditionalCheckFailed}, Errors: []error{ErrLeaseLost}}
}

// RequestNotStarted is the refusal of op on pk when the REQ# item is not
// STARTED with the caller's request_hash: a *TxError matching
// ErrRequestState.
func RequestNotStarted(op, pk string) error {
	return &TxError{Op: op, PK: pk, Reasons: []string{ReasonConditionalCheckFailed}, Errors: []error{ErrRequestState}}
}

// ValidateLease checks the lease a caller passes to ReleaseLease (and that
// every other check of a lease starts with): a valid pk and a token.
func ValidateLease(l Lease) error {
	if err := checkPK(l.PK); err != nil {
		return err
	}
	if l.Token == "" {
		return invalid("lease token", "empty")
	}
	return nil
}

// validateLeaseTimes checks the times of an acquire or refresh: a lease
// that ends after now, with a ttl no earlier than its end.
func validateLeaseTimes(now time.Time, expiresAt, ttl int64) error {
	if now.IsZero() {
		return invalid("now", "zero time")
	}
	if expiresAt <= now.Unix() {
		return invalid("lease_expires_at", "not after now")
	}
	if ttl < expiresAt {
		return invalid("ttl", "before lease_expires_at")
	}
	return nil
}

// ValidateAcquire checks the input of AcquireLease; an error matches
// ErrInvalidInput. Every Validate function is the check a Table makes
// before its first request.
func ValidateAcquire(in AcquireInput) error {
	if err := ValidateLease(Lease{PK: in.PK, Token: in.Token}); err != nil {
		return err
	}
	if in.IfMetaNotNewerN != "" {
		if in.IfMetaNotNewer == nil {
			return invalid("IfMetaNotNewerN", "set without IfMetaNotNewer")
		}
		if !validN(in.IfMetaNotNewerN) {
			return invalid("IfMetaNotNewerN", "not a number: "+strconv.Quote(in.IfMetaNotNewerN))
		}
	}
	return validateLeaseTimes(in.Now, in.ExpiresAt, in.TTL)
}

// MetaNotNewerText is the exact generated_at an acquire with
// IfMetaNotNewer compares META's with (IfMetaNotNewerN, or
// *IfMetaNotNewer as text).
func MetaNotNewerText(in AcquireInput) string { return numText(in.IfMetaNotNewerN, *in.IfMetaNotNewer) }

// ValidateRefresh checks the input of RefreshLease.
func ValidateRefresh(in RefreshInput) error {
	if err := ValidateLease(in.Lease); err != nil {
		return err
	}
	return validateLeaseTimes(in.Now, in.ExpiresAt, in.TTL)
}

func validateCompletion(rc *RequestCompletion) error {
	if rc == nil {
		return nil
	}
	if err := checkPart("idempotency key", rc.Key, false); err != nil {
		return err
	}
	if rc.Hash == "" {
		return invalid("request_hash", "empty")
	}
	return nil
}

// validatePublisher checks what both recipes take alike: the publisher's
// lease, Now, and the pk of the item written (what), empty or the lease's.
func validatePublisher(l Lease, now time.Time, what, pk string) error {
	if err := ValidateLease(l); err != nil {
		return err
	}
	if now.IsZero() {
		return invalid("now", "zero time")
	}
	if pk != "" && pk != l.PK {
		return invalid(what+" pk", "differs from lease pk")
	}
	return nil
}

// ValidatePublish checks the input of Publish.
func ValidatePublish(in PublishInput) error {
	if err := validatePublisher(in.Lease, in.Now, "meta", in.Meta.PK); err != nil {
		return err
	}
	if in.Meta.S3Key == "" {
		return invalid("s3_key", "empty")
	}
	if in.Meta.RevalidateSeconds < 0 || in.Meta.GeneratedAt < 0 || in.Meta.TTL < 0 {
		return invalid("meta", "negative number")
	}
	return validateCompletion(in.Request)
}

// ValidatePublishPointer checks the input of PublishPointer.
func ValidatePublishPointer(in PublishPointerInput) error {
	if err := validatePublisher(in.Lease, in.Now, "version", in.Version.PK); err != nil {
		return err
	}
	if err := checkPart("version id", in.Version.ID, false); err != nil {
		return err
	}
	if in.Version.S3Key == "" {
		return invalid("s3_key", "empty")
	}
	if in.RevalidateSeconds < 0 || in.Version.GeneratedAt < 0 || in.Version.TTL < 0 || in.MetaTTL < 0 || in.ExpectedVersion < 0 {
		return invalid("pointer publish", "negative number")
	}
	if in.Previous != "" {
		if id, ok := strings.CutPrefix(in.Previous, VersionSKPrefix); !ok || checkPart("previous version id", id, false) != nil {
			return invalid("previous", "not a VER# sort key: "+strconv.Quote(in.Previous))
		}
		if in.PreviousTTL <= 0 {
			return invalid("previous ttl", "must be positive with a previous version")
		}
	}
	return validateCompletion(in.Request)
}

// ValidateBeginRequest checks the input of BeginRequest.
func ValidateBeginRequest(in BeginRequestInput) error {
	if err := ValidateRequestRef(in.PK, in.Key, in.Hash); err != nil {
		return err
	}
	if in.Now.IsZero() {
		return invalid("now", "zero time")
	}
	if in.TTL <= in.Now.Unix() {
		return invalid("ttl", "not after now")
	}
	return nil
}

// ValidateRequestRef checks the arguments of FailRequest and
// AbandonRequest.
func ValidateRequestRef(pk, key, hash string) error {
	if err := checkRequestKey(pk, key); err != nil {
		return err
	}
	if hash == "" {
		return invalid("request_hash", "empty")
	}
	return nil
}

// checkRequestKey checks the key of a REQ# item: pk and idempotency key.
func checkRequestKey(pk, key string) error {
	if err := checkPK(pk); err != nil {
		return err
	}
	return checkPart("idempotency key", key, false)
}

// checkVersionKey checks the key of a VER# item: pk and version id.
func checkVersionKey(pk, id string) error {
	if err := checkPK(pk); err != nil {
		return err
	}
	return checkPart("version id", id, false)
}
