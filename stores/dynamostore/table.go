package dynamostore

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
)

// ErrTableMismatch is returned by CreateTable when the table exists with a
// key schema or TTL attribute other than the one the store needs.
var ErrTableMismatch = errors.New("dynamostore: existing table does not match")

// CreateTable creates table with the store's key schema (string partition
// key "pk" and string sort key "sk", or the names given with
// WithKeyAttributes), on-demand billing, and TTL enabled on "ttl", and waits
// until it is ACTIVE. It is idempotent: an existing table with the same key
// schema is fine (its TTL is enabled if it was not), one with another
// schema is ErrTableMismatch. Options other than WithKeyAttributes are
// ignored.
func CreateTable(ctx context.Context, client Client, table string, opts ...Option) error {
	cfg, err := newConfig("CreateTable", client, table, opts)
	if err != nil {
		return err
	}
	in := &dynamodb.CreateTableInput{
		TableName:   aws.String(table),
		BillingMode: types.BillingModePayPerRequest,
		AttributeDefinitions: []types.AttributeDefinition{
			{AttributeName: aws.String(cfg.pk), AttributeType: types.ScalarAttributeTypeS},
		},
		KeySchema: []types.KeySchemaElement{
			{AttributeName: aws.String(cfg.pk), KeyType: types.KeyTypeHash},
		},
	}
	if cfg.sk != "" {
		in.AttributeDefinitions = append(in.AttributeDefinitions,
			types.AttributeDefinition{AttributeName: aws.String(cfg.sk), AttributeType: types.ScalarAttributeTypeS})
		in.KeySchema = append(in.KeySchema,
			types.KeySchemaElement{AttributeName: aws.String(cfg.sk), KeyType: types.KeyTypeRange})
	}
	if _, err := client.CreateTable(ctx, in); err != nil {
		var inUse *types.ResourceInUseException
		if !errors.As(err, &inUse) {
			return fmt.Errorf("dynamostore: create table %s: %w", table, err)
		}
	}
	desc, err := waitActive(ctx, client, table)
	if err != nil {
		return err
	}
	if err := checkSchema(desc, cfg); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrTableMismatch, table, err)
	}
	return enableTTL(ctx, client, table)
}

func waitActive(ctx context.Context, client Client, table string) (*types.TableDescription, error) {
	delay := 100 * time.Millisecond
	for {
		out, err := client.DescribeTable(ctx, &dynamodb.DescribeTableInput{TableName: aws.String(table)})
		if err != nil {
			var notFound *types.ResourceNotFoundException
			if !errors.As(err, &notFound) {
				return nil, fmt.Errorf("dynamostore: describe table %s: %w", table, err)
			}
		} else if out.Table != nil && out.Table.TableStatus == types.TableStatusActive {
			return out.Table, nil
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, fmt.Errorf("dynamostore: waiting for table %s: %w", table, ctx.Err())
		case <-t.C:
		}
		delay = min(2*delay, 2*time.Second)
	}
}

func checkSchema(desc *types.TableDescription, cfg config) error {
	want := map[string]types.KeyType{cfg.pk: types.KeyTypeHash}
	if cfg.sk != "" {
		want[cfg.sk] = types.KeyTypeRange
	}
	if len(desc.KeySchema) != len(want) {
		return fmt.Errorf("key schema has %d attributes, want %d", len(desc.KeySchema), len(want))
	}
	for _, k := range desc.KeySchema {
		name := aws.ToString(k.AttributeName)
		if want[name] != k.KeyType {
			return fmt.Errorf("key attribute %s is %s", name, k.KeyType)
		}
	}
	for _, d := range desc.AttributeDefinitions {
		name := aws.ToString(d.AttributeName)
		if _, key := want[name]; key && d.AttributeType != types.ScalarAttributeTypeS {
			return fmt.Errorf("key attribute %s has type %s, want S", name, d.AttributeType)
		}
	}
	return nil
}

func enableTTL(ctx context.Context, client Client, table string) error {
	out, err := client.DescribeTimeToLive(ctx, &dynamodb.DescribeTimeToLiveInput{TableName: aws.String(table)})
	if err != nil {
		return fmt.Errorf("dynamostore: describe ttl of %s: %w", table, err)
	}
	if d := out.TimeToLiveDescription; d != nil {
		switch d.TimeToLiveStatus {
		case types.TimeToLiveStatusEnabled, types.TimeToLiveStatusEnabling:
			if name := aws.ToString(d.AttributeName); name != attrTTL {
				return fmt.Errorf("%w: %s: TTL is on attribute %q, want %q", ErrTableMismatch, table, name, attrTTL)
			}
			return nil
		}
	}
	_, err = client.UpdateTimeToLive(ctx, &dynamodb.UpdateTimeToLiveInput{
		TableName: aws.String(table),
		TimeToLiveSpecification: &types.TimeToLiveSpecification{
			AttributeName: aws.String(attrTTL),
			Enabled:       aws.Bool(true),
		},
	})
	if err != nil && !strings.Contains(strings.ToLower(err.Error()), "already enabled") {
		return fmt.Errorf("dynamostore: enable ttl on %s: %w", table, err)
	}
	return nil
}
