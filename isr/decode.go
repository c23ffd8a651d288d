package isr

import "strconv"

// Attribute names of the schema. Every table stores an item under these
// names, so tools read one schema on DynamoDB, Redis and in files.
const (
	AttrPK                = "pk"
	AttrSK                = "sk"
	AttrS3Key             = "s3_key"
	AttrGeneratedAt       = "generated_at"
	AttrRevalidateSeconds = "revalidate_seconds"
	AttrETag              = "etag"
	AttrTTL               = "ttl"
	AttrCurrentSK         = "current_sk"
	AttrVersion           = "version"
	AttrLeaseToken        = "lease_token"
	AttrLeaseExpiresAt    = "lease_expires_at"
	AttrRequestHash       = "request_hash"
	AttrStatus            = "status"
	AttrResultS3Key       = "result_s3_key"
)

// Decoding. Numbers are accepted as integers or decimals (floored into the
// int64 fields; the exact text goes to the N fields, see decoder.exact);
// any other type is a *CorruptItemError.

func getS(pk, sk string, item Item, attr string, required bool) (string, error) {
	v, ok := item[attr]
	if !ok {
		if required {
			return "", &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "missing"}
		}
		return "", nil
	}
	if v.Type != TypeS {
		return "", &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "want S, got " + v.Type.goName()}
	}
	return v.Value, nil
}

func getN(pk, sk string, item Item, attr string, required bool) (int64, error) {
	v, ok := item[attr]
	if !ok {
		if required {
			return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "missing"}
		}
		return 0, nil
	}
	if v.Type != TypeN {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "want N, got " + v.Type.goName()}
	}
	return parseN(pk, sk, attr, v.Value)
}

func parseN(pk, sk, attr, s string) (int64, error) {
	if !validN(s) {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "bad number " + strconv.Quote(s)}
	}
	if i, err := strconv.ParseInt(s, 10, 64); err == nil {
		return i, nil
	}
	f, err := strconv.ParseFloat(s, 64)
	if err != nil || f != f || f > 9e18 || f < -9e18 {
		return 0, &CorruptItemError{PK: pk, SK: sk, Attr: attr, Reason: "bad number " + strconv.Quote(s)}
	}
	i := int64(f)
	if float64(i) > f {
		i--
	}
	return i, nil
}

// ttl reads the ttl attribute, garbage collection only: one of another
// type or unreadable is taken as absent, never an error.
func (d *decoder) ttl() int64 {
	v, err := getN(d.pk, d.sk, d.item, AttrTTL, false)
	if err != nil {
		return 0
	}
	return v
}

type decoder struct {
	pk, sk string
	item   Item
	err    error
}

func (d *decoder) s(attr string, required bool) string {
	if d.err != nil {
		return ""
	}
	v, err := getS(d.pk, d.sk, d.item, attr, required)
	d.err = err
	return v
}

func (d *decoder) n(attr string, required bool) int64 {
	if d.err != nil {
		return 0
	}
	v, err := getN(d.pk, d.sk, d.item, attr, required)
	d.err = err
	return v
}

// exact is the text of number attribute attr when it is not exactly the
// integer v read from it ("" otherwise): the exact value the N fields of
// Meta, Lease and Version carry.
func (d *decoder) exact(attr string, v int64) string {
	if d.err != nil {
		return ""
	}
	n, ok := d.item[attr]
	if !ok || n.Type != TypeN || n.Value == strconv.FormatInt(v, 10) {
		return ""
	}
	return n.Value
}

func decodeMeta(pk string, item Item) (Meta, error) {
	d := decoder{pk: pk, sk: SKMeta, item: item}
	// Under recipe B (current_sk present) revalidate_seconds may be absent
	// from META and from the VER# row (merged in by getMeta): a writer that
	// sets only the pointer and the version. The Coordinator then applies
	// its default (WithDefaultRevalidate); a recipe-A META must carry it.
	_, hasPointer := item[AttrCurrentSK]
	_, hasRevalidate := item[AttrRevalidateSeconds]
	m := Meta{
		PK:                pk,
		S3Key:             d.s(AttrS3Key, true),
		GeneratedAt:       d.n(AttrGeneratedAt, true),
		RevalidateSeconds: d.n(AttrRevalidateSeconds, !hasPointer),
		ETag:              d.s(AttrETag, false),
		TTL:               d.ttl(),
		CurrentSK:         d.s(AttrCurrentSK, false),
		Version:           d.n(AttrVersion, false),
		RevalidateMissing: !hasRevalidate,
	}
	m.GeneratedAtN = d.exact(AttrGeneratedAt, m.GeneratedAt)
	m.RevalidateSecondsN = d.exact(AttrRevalidateSeconds, m.RevalidateSeconds)
	return m, d.err
}

// decodeMetaLoose reads whatever META attributes are present (for mapping a
// cancellation reason), without requiring any.
func decodeMetaLoose(pk string, item Item) (Meta, error) {
	d := decoder{pk: pk, sk: SKMeta, item: item}
	m := Meta{PK: pk, GeneratedAt: d.n(AttrGeneratedAt, false), Version: d.n(AttrVersion, false)}
	m.GeneratedAtN = d.exact(AttrGeneratedAt, m.GeneratedAt)
	return m, d.err
}

// DecodeLease is the LOCK item of pk, or the *CorruptItemError of an item
// that does not hold one.
func DecodeLease(pk string, item Item) (Lease, error) {
	d := decoder{pk: pk, sk: SKLock, item: item}
	l := Lease{
		PK:        pk,
		Token:     d.s(AttrLeaseToken, true),
		ExpiresAt: d.n(AttrLeaseExpiresAt, true),
		TTL:       d.ttl(),
	}
	l.ExpiresAtN = d.exact(AttrLeaseExpiresAt, l.ExpiresAt)
	return l, d.err
}

func decodeRequest(pk, k string, item Item) (Request, error) {
	d := decoder{pk: pk, sk: RequestSKPrefix + k, item: item}
	r := Request{
		PK:          pk,
		Key:         k,
		Hash:        d.s(AttrRequestHash, true),
		Status:      RequestStatus(d.s(AttrStatus, true)),
		ResultS3Key: d.s(AttrResultS3Key, false),
		TTL:         d.ttl(),
	}
	if d.err == nil {
		switch r.Status {
		case RequestStarted, RequestCompleted, RequestFailed:
		default:
			return Request{}, &CorruptItemError{PK: pk, SK: d.sk, Attr: AttrStatus, Reason: "unknown status " + strconv.Quote(string(r.Status))}
		}
	}
	return r, d.err
}

func decodeVersion(pk, id string, item Item) (Version, error) {
	d := decoder{pk: pk, sk: VersionSKPrefix + id, item: item}
	v := Version{
		PK:          pk,
		ID:          id,
		S3Key:       d.s(AttrS3Key, true),
		GeneratedAt: d.n(AttrGeneratedAt, true),
		ETag:        d.s(AttrETag, false),
		TTL:         d.ttl(),
	}
	v.GeneratedAtN = d.exact(AttrGeneratedAt, v.GeneratedAt)
	return v, d.err
}
