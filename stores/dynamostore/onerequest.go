package dynamostore

import (
	"context"
	"fmt"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem/storekit"
)

// One request (WithOneRequest): DoTx's claim inside its
// TransactWriteItems (storekit.TxClaimer).
//
// DynamoDB cannot hold a key while fn runs, so a fresh DoTx claims
// nothing beforehand: fn builds its items, and they are sent in one
// TransactWriteItems with a Put of the key's completed record conditioned
// on the key having no record (attempt 1: the fencing token fn sees). So:
//
//   - a fresh call is one request, and writes only the transaction's
//     items; a crash before it leaves nothing.
//   - a duplicate whose caller committed first has its transaction
//     cancelled by that condition; the cancellation carries the record
//     (ALL_OLD), so the call is answered with it (a replay, or "in
//     progress" for another caller's claim) with nothing of its own
//     written: one request, fn having built its items.
//   - concurrent duplicates of a fresh key both run fn; one transaction
//     commits, the others are answered with its record.
//   - a key that has a record the condition refuses but a claim may take
//     (expired, released, or a stale claim) is claimed as without one
//     commit (storekit.ErrClaimFirst): Claim's request, then the
//     transaction conditioned on the claim's nonce.
//   - a lost reply is settled by a fence: a Put of an expired record under
//     the same condition, which excludes the transaction if it had not
//     applied; refused, the record it finds says whether it did.

// callRunner is DoTx's runner: a txRunner that claims inside its
// transaction while the key has no record. One is made per call; found is
// the record a cancelled transaction met, which answers the call's next
// ClaimTx.
type callRunner struct {
	txRunner
	tried bool
	found *storekit.Record
}

// ClaimTx implements storekit.TxClaimer (see above). wait is not used:
// nothing is held, so nothing is waited for.
func (r *callRunner) ClaimTx(ctx context.Context, req storekit.ClaimRequest, _ bool) (storekit.ClaimResult, storekit.OpenTx, error) {
	k, err := r.st.begin("claim", req.Key, storekit.ValidateClaim(req))
	if err != nil {
		return storekit.ClaimResult{}, nil, err
	}
	now := r.st.nowMs()
	switch {
	case r.found != nil:
		cur := r.found
		r.found = nil
		if d := storekit.DecideClaim(cur, req, now); !d.Write {
			return d.Result(), nil, nil
		}
		return storekit.ClaimResult{}, nil, storekit.ErrClaimFirst
	case r.tried:
		return storekit.ClaimResult{}, nil, storekit.ErrClaimFirst
	}
	r.tried = true
	rec := storekit.DecideClaim(nil, req, now).Record // attempt 1
	return storekit.ClaimResult{Outcome: storekit.Claimed, Record: rec}, &freshTx{r: r, k: k, req: req, now: now}, nil
}

// freshTx is a claim of a key without a record, written by its
// transaction's Put.
type freshTx struct {
	r   *callRunner
	k   map[string]types.AttributeValue
	req storekit.ClaimRequest
	now int64 // the claim's time: its record's started_at
}

// Rollback implements storekit.OpenTx: nothing was written.
func (o *freshTx) Rollback() {}

// RunTx implements storekit.TxRunner: body's items and the Put of the
// completed record, conditioned on no record, in one TransactWriteItems.
func (o *freshTx) RunTx(ctx context.Context, _ storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	st := o.r.st
	tx := &Tx{st: st, pk: o.k}
	bctx := storekit.RefuseSteps(context.WithValue(ctx, txCtxKey{}, tx),
		"inside a DoTx of a dynamostore.Store WithOneRequest (two runs of its fn may be live at once)")
	comp, err := body(bctx)
	if err != nil {
		return err
	}
	if err := storekit.ValidateCompletion(comp); err != nil {
		return fmt.Errorf("dynamostore: commit: %w", err)
	}
	items, kinds, _ := tx.finish()
	put := st.freshPut(o.k, o.req, o.now, comp)
	return st.sendTx(ctx, txSend{
		items: items, kinds: kinds, nonce: o.req.Nonce,
		record:  func(string) types.TransactWriteItem { return types.TransactWriteItem{Put: put} },
		unknown: func(_ string, err error) error { return o.fence(ctx, err) },
		refused: o.met,
	})
}

// met handles the record a refused Put met (ALL_OLD): this call's own,
// completed (an earlier send applied), or another's, which answers the
// call's next ClaimTx.
func (o *freshTx) met(item map[string]types.AttributeValue) error {
	if completedBy(item, o.req.Nonce) {
		return nil
	}
	if item == nil {
		return errNoOldItem()
	}
	cur, err := o.r.st.decode(o.req.Key, item)
	if err != nil {
		return err
	}
	o.r.found = cur
	return fmt.Errorf("dynamostore: commit: %s has a record: %w", o.req.Key, storekit.ErrLostOwnership)
}

// fence settles a transaction whose reply was lost (sendErr): a Put of an
// expired record with a nonce of its own, under the transaction's
// condition (no record). Applied, the transaction can no longer apply:
// nothing of the call was committed, and its next claim takes the expired
// record over as a claim does. Refused, the record it finds says whether
// the transaction applied.
func (o *freshTx) fence(ctx context.Context, sendErr error) error {
	st := o.r.st
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	req := o.req
	req.Nonce = "fence-" + txToken()
	item := st.claimItem(o.k, req, o.now, 0)
	item[attrExpiresAt], item[attrTTL] = zeroValue, attrN(st.ttlAt(o.now))
	var last error
	for try := range fenceTries {
		if try > 0 {
			if err := sleepCtx(fctx, time.Duration(50<<try)*time.Millisecond); err != nil {
				break
			}
		}
		_, err := st.client.PutItem(fctx, &dynamodb.PutItemInput{
			TableName: &st.table, Item: item, ConditionExpression: &exprAbsent, ExpressionAttributeNames: st.pkName,
			ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
		})
		if err == nil {
			return fmt.Errorf("dynamostore: commit: the transaction did not apply (fenced after: %w)", sendErr)
		}
		old, refused := conditionFailed(err)
		if !refused {
			last = err
			continue
		}
		return o.met(old)
	}
	return &storekit.OutcomeUnknownError{Err: sendErr, ReadErr: last}
}

// freshPut is the Put of a key's first record, completed with c by the
// claim req made at now, conditioned on the key having no record.
func (st *Store) freshPut(k map[string]types.AttributeValue, req storekit.ClaimRequest, now int64, c storekit.Completion) *types.Put {
	done := st.nowMs()
	exp := done + c.TTL.Milliseconds() // as Complete's
	item := st.claimItem(k, req, now, exp)
	item[attrStatus] = statusValue(c.Status)
	item[attrCompletedAt], item[attrHeartbeatAt] = attrN(done), attrN(done)
	item[attrTTL] = attrN(st.ttlAt(exp))
	if c.Result != nil {
		item[attrResult] = attrB(c.Result)
	}
	if c.Error != nil {
		item[attrErrMessage], item[attrErrType] = attrS(c.Error.Message), attrS(c.Error.Type)
	}
	if !freshConditioned { // this package's tests only: the broken variant
		return &types.Put{TableName: &st.table, Item: item}
	}
	return &types.Put{
		TableName:                           &st.table,
		Item:                                item,
		ConditionExpression:                 &exprAbsent,
		ExpressionAttributeNames:            st.pkName,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// freshConditioned is false only in this package's tests of the broken
// variant (TestDoTxOneRequestBroken): the record's Put without its
// condition.
var freshConditioned = true
