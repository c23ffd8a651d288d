package dynamostore

import (
	"context"
	"fmt"
	"iter"
	"strings"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

var _ storekit.Lister = (*Store)(nil)

// Scanner is the DynamoDB call Records needs beyond Client;
// *dynamodb.Client has it.
type Scanner interface {
	Scan(ctx context.Context, in *dynamodb.ScanInput, optFns ...func(*dynamodb.Options)) (*dynamodb.ScanOutput, error)
}

// listPage is how many items one Scan request reads at most.
const listPage = 1000

// Records implements storekit.Lister. DynamoDB keeps no index of the store's
// items: it scans the whole table, a page (at most 1000 items or 1 MB) per
// request, with a filter that keeps the store's items (partition key
// starting with the key prefix, the store's sort key value) that have not
// expired; the table's read capacity pays for every item read, filtered
// out or not. A Scan is an eventually consistent read that takes no lock,
// so claims go on while it runs; memory holds one page. The client must
// also implement Scanner (a *dynamodb.Client does); otherwise the sequence
// yields an error.
func (st *Store) Records(ctx context.Context) iter.Seq2[*storekit.Record, error] {
	return func(yield func(*storekit.Record, error) bool) {
		if err := st.Validate(); err != nil {
			yield(nil, err)
			return
		}
		sc, ok := st.client.(Scanner)
		if !ok {
			yield(nil, fmt.Errorf("dynamostore: list: the client (%T) has no Scan method", st.client))
			return
		}
		names := map[string]string{"#pk": st.cfg.pk, "#exp": attrExpiresAt}
		filter := "begins_with(#pk, :prefix) AND #exp > :now"
		values := map[string]types.AttributeValue{
			":prefix": attrS(st.cfg.prefix),
			":now":    attrN(st.nowMs()),
		}
		if st.cfg.prefix == "" {
			filter = "attribute_exists(#pk) AND #exp > :now"
			delete(values, ":prefix")
		}
		if st.cfg.sk != "" {
			names["#sk"] = st.cfg.sk
			values[":sk"] = attrS(st.cfg.skValue)
			filter += " AND #sk = :sk"
		}
		in := &dynamodb.ScanInput{
			TableName:                 st.tableName(),
			FilterExpression:          aws.String(filter),
			ExpressionAttributeNames:  names,
			ExpressionAttributeValues: values,
			Limit:                     aws.Int32(listPage),
		}
		for {
			out, err := sc.Scan(ctx, in)
			if err != nil {
				yield(nil, storeErr("list", err))
				return
			}
			for _, item := range out.Items {
				pk, ok := item[st.cfg.pk].(*types.AttributeValueMemberS)
				if !ok || !strings.HasPrefix(pk.Value, st.cfg.prefix) {
					continue
				}
				rec, err := st.decode(strings.TrimPrefix(pk.Value, st.cfg.prefix), item)
				if err != nil {
					if !yield(nil, err) {
						return
					}
					continue
				}
				if !yield(rec, nil) {
					return
				}
			}
			if len(out.LastEvaluatedKey) == 0 {
				return
			}
			in.ExclusiveStartKey = out.LastEvaluatedKey
		}
	}
}
