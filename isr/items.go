package isr

import (
	"regexp"
	"strconv"
	"strings"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// The Redis and file tables keep every item with the DynamoDB item's
// attribute names. An item read from either is turned into the DynamoDB
// attribute map it stands for and decoded by the same functions as a
// DynamoDB item, so all tables read one schema the same way.

// numberAttrs are the schema's N attributes; every other attribute is S.
var numberAttrs = map[string]bool{
	attrGeneratedAt: true,
	attrRevalidate:  true,
	attrTTL:         true,
	attrVersion:     true,
	attrLeaseExp:    true,
}

// nPattern is the decimal text DynamoDB accepts as a number: an optional
// minus sign, digits with an optional fraction, an optional exponent.
var nPattern = regexp.MustCompile(`^-?(?:[0-9]+\.?[0-9]*|\.[0-9]+)(?:[eE][+-]?[0-9]+)?$`)

// validN reports whether s is a number in DynamoDB's decimal text form,
// with an exponent within ±maxExponent.
func validN(s string) bool { return nPattern.MatchString(s) && exponentOK(s) }

// attrsFromStrings is the DynamoDB item a Redis hash stands for: the
// schema's number attributes as N (their text as stored, so a bad one
// decodes as a corrupt number), everything else as S.
func attrsFromStrings(h map[string]string) map[string]types.AttributeValue {
	item := make(map[string]types.AttributeValue, len(h))
	for k, v := range h {
		if numberAttrs[k] {
			item[k] = &types.AttributeValueMemberN{Value: v}
		} else {
			item[k] = &types.AttributeValueMemberS{Value: v}
		}
	}
	return item
}

// pointerSK returns META's current_sk if it has one, checked to name a
// VER# row.
func pointerSK(pk string, meta map[string]types.AttributeValue) (string, bool, error) {
	if _, ok := meta[attrCurrentSK]; !ok {
		return "", false, nil
	}
	cur, err := getS(pk, SKMeta, meta, attrCurrentSK, true)
	if err != nil {
		return "", false, err
	}
	if !strings.HasPrefix(cur, VersionSKPrefix) || len(cur) == len(VersionSKPrefix) {
		return "", false, &CorruptItemError{PK: pk, SK: SKMeta, Attr: attrCurrentSK, Reason: "not a VER# sort key: " + strconv.Quote(cur)}
	}
	return cur, true, nil
}

// missingPointer is the error for a current_sk naming a row that does not
// exist.
func missingPointer(pk, cur string) error {
	return &CorruptItemError{PK: pk, SK: SKMeta, Attr: attrCurrentSK, Reason: "points to a missing row " + strconv.Quote(cur)}
}
