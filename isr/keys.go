package isr

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"strings"
	"unicode/utf8"

	"github.com/idem-go/idem/jcs"
)

// Sort keys and prefixes of the items package isr reads and writes. They are
// part of the table schema shared with other services; see docs/isr.md.
const (
	// SKMeta is the sort key of the metadata (pointer) item.
	SKMeta = "META"
	// SKLock is the sort key of the lease item.
	SKLock = "LOCK"
	// RequestSKPrefix prefixes the sort key of a request idempotency item:
	// "REQ#<idempotency_key>".
	RequestSKPrefix = "REQ#"
	// VersionSKPrefix prefixes the sort key of a version item: "VER#<id>".
	VersionSKPrefix = "VER#"

	// EnvTableName names the environment variable that holds the table name.
	EnvTableName = "FACETHEORY_CACHE_TABLE_NAME"
)

// maxKeyPart bounds idempotency keys and version ids so that a sort key stays
// far below DynamoDB's 1024-byte limit.
const maxKeyPart = 512

// TableNameFromEnv returns the table name from FACETHEORY_CACHE_TABLE_NAME,
// or ErrInvalidInput when it is unset or blank.
func TableNameFromEnv() (string, error) {
	v := strings.TrimSpace(os.Getenv(EnvTableName))
	if v == "" {
		return "", invalid("table name", EnvTableName+" is not set")
	}
	return v, nil
}

// HashCacheKey returns the lowercase hex SHA-256 of a cache key (for example
// a normalised URL path). The raw cache key never reaches the table.
func HashCacheKey(cacheKey string) string {
	sum := sha256.Sum256([]byte(cacheKey))
	return hex.EncodeToString(sum[:])
}

// PK returns the partition key of a cache entry: "CACHE#<sha256 hex>" when
// tenant is empty, "TENANT#<tenant>#CACHE#<sha256 hex>" otherwise. An empty
// cache key, or a tenant that contains '#', a control character or invalid
// UTF-8, is ErrInvalidInput.
func PK(tenant, cacheKey string) (string, error) {
	if cacheKey == "" {
		return "", invalid("cache key", "empty")
	}
	h := HashCacheKey(cacheKey)
	if tenant == "" {
		return "CACHE#" + h, nil
	}
	if err := checkPart("tenant", tenant, true); err != nil {
		return "", err
	}
	return "TENANT#" + tenant + "#CACHE#" + h, nil
}

// RequestIDKey returns the idempotency key for an HTTP-triggered
// regeneration: the request id (for example the x-request-id header) itself.
func RequestIDKey(requestID string) (string, error) {
	if err := checkPart("request id", requestID, false); err != nil {
		return "", err
	}
	return requestID, nil
}

// MessageIDKey returns the idempotency key for a queue-triggered
// regeneration: the queue message id (for example an SQS MessageId) itself.
func MessageIDKey(messageID string) (string, error) {
	if err := checkPart("message id", messageID, false); err != nil {
		return "", err
	}
	return messageID, nil
}

// VersionedKey returns the idempotency key for "one regeneration per cache
// key, deployment and policy": the lowercase hex SHA-256 of
// "<cache_key>|<deploy_id>|<policy_version>", the formula other services
// sharing the table use. deployID and policyVersion must be non-empty and
// free of '|', which keeps the joined form unambiguous.
func VersionedKey(cacheKey, deployID, policyVersion string) (string, error) {
	if cacheKey == "" {
		return "", invalid("cache key", "empty")
	}
	for _, p := range []struct{ what, v string }{{"deploy id", deployID}, {"policy version", policyVersion}} {
		if p.v == "" {
			return "", invalid(p.what, "empty")
		}
		if strings.Contains(p.v, "|") {
			return "", invalid(p.what, "contains '|'")
		}
	}
	sum := sha256.Sum256([]byte(cacheKey + "|" + deployID + "|" + policyVersion))
	return hex.EncodeToString(sum[:]), nil
}

// RequestHash returns a deterministic hash of the inputs that matter for a
// regeneration (tenant, cache key, policy knobs): the lowercase hex SHA-256
// of the RFC 8785 JSON array of the given strings (JavaScript's
// JSON.stringify writes the same bytes: no HTML escaping). Order matters.
// Invalid UTF-8 in an input is hashed as JSON has always written it, each
// bad byte as U+FFFD.
func RequestHash(inputs ...string) string {
	b := []byte{'['}
	for i, s := range inputs {
		if i > 0 {
			b = append(b, ',')
		}
		b = jcs.AppendString(b, strings.Map(func(r rune) rune { return r }, s)) // each bad byte becomes U+FFFD
	}
	b = append(b, ']')
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// checkPart validates a caller-supplied piece of a key.
func checkPart(what, v string, noHash bool) error {
	if v == "" {
		return invalid(what, "empty")
	}
	if len(v) > maxKeyPart {
		return invalid(what, fmt.Sprintf("longer than %d bytes", maxKeyPart))
	}
	if !utf8.ValidString(v) {
		return invalid(what, "not valid UTF-8")
	}
	for _, r := range v {
		if r < 0x20 || r == 0x7f {
			return invalid(what, "contains a control character")
		}
		if noHash && r == '#' {
			return invalid(what, "contains '#'")
		}
	}
	return nil
}

// checkPK validates a partition key built by PK (or by another service
// following the same schema).
func checkPK(pk string) error {
	if pk == "" {
		return invalid("pk", "empty")
	}
	if len(pk) > 1024 || !utf8.ValidString(pk) {
		return invalid("pk", "too long or not UTF-8")
	}
	if !strings.HasPrefix(pk, "CACHE#") && !strings.HasPrefix(pk, "TENANT#") {
		return invalid("pk", "must start with CACHE# or TENANT#")
	}
	return nil
}
