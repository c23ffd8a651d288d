package dynamostore

import (
	"fmt"
	"strconv"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/storekit"
)

// decode turns an item into a record. Anything missing, wrongly typed or
// out of range is a *storekit.CorruptRecordError.
func (st *Store) decode(key string, item map[string]types.AttributeValue) (*storekit.Record, error) {
	rec, err := decodeItem(key, item)
	if err != nil {
		return nil, &storekit.CorruptRecordError{Key: key, Err: err}
	}
	return rec, nil
}

func decodeItem(key string, item map[string]types.AttributeValue) (*storekit.Record, error) {
	v, err := numAttr(item, attrVersion)
	if err != nil {
		return nil, err
	}
	if v != encodingVersion {
		return nil, fmt.Errorf("unsupported record version %d", v)
	}
	r := &storekit.Record{Key: key}
	var status string
	for _, f := range []struct {
		name string
		dst  *string
	}{{attrStatus, &status}, {attrNonce, &r.Nonce}, {attrPayloadHash, &r.PayloadHash}} {
		if *f.dst, err = strAttr(item, f.name); err != nil {
			return nil, err
		}
	}
	r.Status = storekit.Status(status)
	for _, f := range []struct {
		name string
		dst  *int64
	}{
		{attrAttempt, &r.Attempt}, {attrStartedAt, &r.StartedAt},
		{attrHeartbeatAt, &r.HeartbeatAt}, {attrExpiresAt, &r.ExpiresAt},
	} {
		if *f.dst, err = numAttr(item, f.name); err != nil {
			return nil, err
		}
	}
	if _, ok := item[attrTakeoverMs]; ok {
		if r.TakeoverMs, err = numAttr(item, attrTakeoverMs); err != nil {
			return nil, err
		}
	}
	if _, ok := item[attrOwner]; ok { // absent from records made before owners were stored
		if r.Owner, err = strAttr(item, attrOwner); err != nil {
			return nil, err
		}
	}
	if _, ok := item[attrCompletedAt]; ok {
		if r.CompletedAt, err = numAttr(item, attrCompletedAt); err != nil {
			return nil, err
		}
	}
	if av, ok := item[attrResult]; ok {
		bv, ok := av.(*types.AttributeValueMemberB)
		if !ok {
			return nil, fmt.Errorf("attribute %s: want B, got %s", attrResult, typeName(av))
		}
		r.Result = bv.Value
		if r.Result == nil {
			r.Result = []byte{}
		}
	}
	_, hasMsg := item[attrErrMessage]
	_, hasType := item[attrErrType]
	switch {
	case hasMsg:
		e := &storekit.RecordedFailure{}
		if e.Message, err = strAttr(item, attrErrMessage); err != nil {
			return nil, err
		}
		if hasType {
			if e.Type, err = strAttr(item, attrErrType); err != nil {
				return nil, err
			}
		}
		r.Error = e
	case hasType:
		return nil, fmt.Errorf("attribute %s without %s", attrErrType, attrErrMessage)
	}
	if err := storekit.CheckRecord(r); err != nil {
		return nil, err
	}
	return r, nil
}

func strAttr(item map[string]types.AttributeValue, name string) (string, error) {
	av, ok := item[name]
	if !ok {
		return "", fmt.Errorf("missing attribute %s", name)
	}
	sv, ok := av.(*types.AttributeValueMemberS)
	if !ok {
		return "", fmt.Errorf("attribute %s: want S, got %s", name, typeName(av))
	}
	return sv.Value, nil
}

func numAttr(item map[string]types.AttributeValue, name string) (int64, error) {
	av, ok := item[name]
	if !ok {
		return 0, fmt.Errorf("missing attribute %s", name)
	}
	nv, ok := av.(*types.AttributeValueMemberN)
	if !ok {
		return 0, fmt.Errorf("attribute %s: want N, got %s", name, typeName(av))
	}
	x, err := strconv.ParseInt(nv.Value, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("attribute %s: %q is not an integer", name, nv.Value)
	}
	return x, nil
}

func typeName(av types.AttributeValue) string {
	switch av.(type) {
	case *types.AttributeValueMemberS:
		return "S"
	case *types.AttributeValueMemberN:
		return "N"
	case *types.AttributeValueMemberB:
		return "B"
	case *types.AttributeValueMemberBOOL:
		return "BOOL"
	case *types.AttributeValueMemberNULL:
		return "NULL"
	case *types.AttributeValueMemberM:
		return "M"
	case *types.AttributeValueMemberL:
		return "L"
	case *types.AttributeValueMemberSS:
		return "SS"
	case *types.AttributeValueMemberNS:
		return "NS"
	case *types.AttributeValueMemberBS:
		return "BS"
	case nil:
		return "nil"
	default:
		return fmt.Sprintf("%T", av)
	}
}
