package dynamostore

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/storekit"
)

// MaxTxItems is how many items fn may add to a Tx: DynamoDB's limit of
// 100 items per TransactWriteItems, less the completed record.
const MaxTxItems = 99

// ErrTxTooLarge is matched by the error of a Tx method that would add a
// 100th item: DoTx sends nothing.
var ErrTxTooLarge = errors.New("dynamostore: more than 99 transaction items")

// ErrInvalidTxItem is matched by the error of a Tx method given an item
// DoTx cannot send: no table name, no key or item, an item on the call's
// own record, or a Tx used after fn returned.
var ErrInvalidTxItem = errors.New("dynamostore: invalid transaction item")

// TxItemError is the error of a Tx method refusing an item. It matches
// ErrTxTooLarge or ErrInvalidTxItem.
type TxItemError struct {
	Index  int    // the item's index among fn's items (the order added)
	Kind   string // Put, Update, Delete or ConditionCheck
	Reason string
	Err    error // ErrTxTooLarge or ErrInvalidTxItem
}

func (e *TxItemError) Error() string {
	return fmt.Sprintf("dynamostore: transaction item %d (%s): %s", e.Index, e.Kind, e.Reason)
}

func (e *TxItemError) Unwrap() error { return e.Err }

// TxCanceledError is the error of a DoTx whose transaction DynamoDB
// cancelled because of one of fn's items (its condition failed, a
// concurrent transaction kept conflicting with it, it was invalid): nothing
// was written, and the claim is released, so a retry runs fn again. The
// call returns it inside an *storekit.StoreError (Op "commit"); errors.As finds
// it.
type TxCanceledError struct {
	Index   int    // index of the first failing item among fn's (the order added)
	Kind    string // Put, Update, Delete or ConditionCheck
	Table   string // its table
	Code    string // the cancellation reason: ConditionalCheckFailed, TransactionConflict, ...
	Message string // DynamoDB's message for it, if any
	// Item is the item as it was when its condition failed, when the
	// item asked for it (ReturnValuesOnConditionCheckFailure ALL_OLD).
	Item map[string]types.AttributeValue
	// Reasons are the cancellation reasons of fn's items, by index.
	Reasons []types.CancellationReason
	Err     error // the *types.TransactionCanceledException
}

func (e *TxCanceledError) Error() string {
	msg := fmt.Sprintf("dynamostore: transaction cancelled by item %d (%s on table %q): %s", e.Index, e.Kind, e.Table, e.Code)
	if e.Message != "" {
		msg += ": " + e.Message
	}
	return msg
}

func (e *TxCanceledError) Unwrap() error { return e.Err }

// Tx collects the writes of a DoTx call's fn. DoTx sends them, in the
// order added, with the call's completed record in one TransactWriteItems
// after fn returned: fn's writes are not visible, not even to fn, before
// then. Each method checks its item and returns a *TxItemError (nothing is
// added) for an item DoTx cannot send; a fn that goes on after such an
// error and returns no error of its own still fails with it, before
// anything is sent. The methods are safe for concurrent use within fn.
type Tx struct {
	st *Store
	pk map[string]types.AttributeValue // the call's record key

	mu    sync.Mutex
	items []types.TransactWriteItem
	kinds []string
	err   error
	done  bool
}

// Put adds a PutItem to the transaction.
func (tx *Tx) Put(p types.Put) error {
	return tx.add("Put", p.TableName, p.Item, types.TransactWriteItem{Put: &p})
}

// Update adds an UpdateItem to the transaction.
func (tx *Tx) Update(u types.Update) error {
	return tx.add("Update", u.TableName, u.Key, types.TransactWriteItem{Update: &u})
}

// Delete adds a DeleteItem to the transaction.
func (tx *Tx) Delete(d types.Delete) error {
	return tx.add("Delete", d.TableName, d.Key, types.TransactWriteItem{Delete: &d})
}

// ConditionCheck adds a condition the transaction requires of an item it
// does not write.
func (tx *Tx) ConditionCheck(c types.ConditionCheck) error {
	return tx.add("ConditionCheck", c.TableName, c.Key, types.TransactWriteItem{ConditionCheck: &c})
}

// Len returns how many items fn has added.
func (tx *Tx) Len() int {
	if tx == nil {
		return 0
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	return len(tx.items)
}

func (tx *Tx) add(kind string, table *string, key map[string]types.AttributeValue, item types.TransactWriteItem) error {
	if tx == nil || tx.st == nil {
		return &TxItemError{Kind: kind, Reason: "nil Tx (DoTx hands fn its Tx)", Err: ErrInvalidTxItem}
	}
	tx.mu.Lock()
	defer tx.mu.Unlock()
	refuse := func(reason string, err error) error {
		e := &TxItemError{Index: len(tx.items), Kind: kind, Reason: reason, Err: err}
		if tx.err == nil {
			tx.err = e
		}
		return e
	}
	switch {
	case tx.done:
		// Not recorded: the call's outcome is already decided.
		return &TxItemError{Index: len(tx.items), Kind: kind, Reason: "Tx used after fn returned", Err: ErrInvalidTxItem}
	case len(tx.items) >= MaxTxItems:
		return refuse(fmt.Sprintf("more than %d items (DynamoDB takes 100 per transaction, one is the call's record)", MaxTxItems), ErrTxTooLarge)
	case aws.ToString(table) == "":
		return refuse("no TableName", ErrInvalidTxItem)
	case len(key) == 0:
		return refuse("no key", ErrInvalidTxItem)
	case tx.isRecord(aws.ToString(table), key):
		return refuse("the call's own record (DynamoDB allows one action per item in a transaction)", ErrInvalidTxItem)
	}
	tx.items = append(tx.items, item)
	tx.kinds = append(tx.kinds, kind)
	return nil
}

// isRecord reports whether key (or a Put's item) in table is the call's
// record.
func (tx *Tx) isRecord(table string, key map[string]types.AttributeValue) bool {
	if table != tx.st.table {
		return false
	}
	for a, want := range tx.pk {
		got, ok := key[a].(*types.AttributeValueMemberS)
		if !ok || got.Value != want.(*types.AttributeValueMemberS).Value {
			return false
		}
	}
	return true
}

// finish closes the Tx to further items and returns fn's items and the
// first refusal, if any.
func (tx *Tx) finish() ([]types.TransactWriteItem, []string, error) {
	tx.mu.Lock()
	defer tx.mu.Unlock()
	tx.done = true
	return tx.items, tx.kinds, tx.err
}

// DoTx runs fn like g.Do runs it (key, duplicates, payload, waits,
// heartbeats, fencing token, Step) and commits fn's writes, added to tx,
// together with the call's completed record in one TransactWriteItems.
// g's store must be a *Store (anything else is an error matching
// storekit.ErrInvalidOption); fn's items may be on any table of the same
// account and region, up to MaxTxItems of them.
//
// The completed record is an update of the call's record conditioned on
// the claim's nonce and on the record being in progress, so the
// transaction commits fn's writes exactly when it records the outcome:
//
//   - fn returns an error: nothing is sent; OnFailure applies (Unlock
//     releases the claim; Lock records the failure outside a transaction).
//     A Tx method's refusal (*TxItemError: over MaxTxItems, an invalid
//     item) is such an error when fn returns nothing of its own.
//   - the claim was lost (taken over after a pause, say): the nonce
//     condition cancels the transaction, nothing of fn's is written, and
//     DoTx returns an error matching storekit.ErrLostOwnership.
//   - one of fn's own conditions fails: nothing is written, the claim is
//     released, and DoTx returns an *storekit.StoreError (Op "commit") around
//     a *TxCanceledError naming the item. A cancellation caused only by
//     concurrent transactions (TransactionConflict) is retried a few times
//     first.
//   - the reply is lost (a timeout, a cut connection, any error that is not
//     a cancellation): the request carries
//     a ClientRequestToken, so the SDK's own retries of it are idempotent
//     (DynamoDB applies a token once within 10 minutes), and the record's
//     in-progress condition refuses a second application in any case.
//     DoTx then fences the transaction: a conditional update on the record
//     that the transaction's condition excludes (the record carries the
//     transaction's token), so a request still on its way can no longer
//     apply. If the fence applies, nothing was committed, for certain: the
//     claim is released and a retry runs fn again. If the record shows
//     this claim's nonce completed, the transaction committed and DoTx
//     returns fn's result. If not even the fence gets an answer, DoTx
//     returns an error matching storekit.ErrOutcomeUnknown with fn's result;
//     the claim is left to go stale.
//
// The heartbeat stops right before the transaction is sent; a heartbeat
// still in flight then can only make the transaction conflict, which is
// retried.
//
// Nothing is held open while fn runs (its items are sent after it
// returned), so fn may call idem.Step for external calls: each step's
// record is written as it finishes, and a retry after a failed
// transaction replays them. StepTx commits writes as a step of their own,
// for a call that goes on after them (g.Do with Steps and a StepTx).
//
// On a Store WithOneRequest, a DoTx of a key without a record is one
// request: no claim first, the record's Put conditioned on no record in
// the transaction, a duplicate answered by the record that cancels it,
// and Step refused inside fn (see WithOneRequest and onerequest.go).
func DoTx[T any](ctx context.Context, g *idem.Guard[T], key string, fn func(context.Context, *Tx) (T, error), opts ...idem.CallOption) (T, error) {
	var zero T
	switch {
	case g == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "nil Guard"}
	case fn == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "nil fn"}
	case ctx == nil:
		return zero, &storekit.OptionError{Option: "DoTx", Reason: "context is nil"}
	}
	return g.Do(storekit.WithTx(ctx, opener("DoTx")), key, txFn(fn), opts...)
}

// txFn is fn as the Guard runs it inside a txRunner's transaction: given
// the runner's Tx, whose own error (an invalid or one item too many) is
// fn's.
func txFn[V any](fn func(context.Context, *Tx) (V, error)) func(context.Context) (V, error) {
	return func(ctx context.Context) (V, error) {
		tx, _ := ctx.Value(txCtxKey{}).(*Tx)
		v, err := fn(ctx, tx)
		if _, _, txErr := tx.finish(); err == nil {
			err = txErr
		}
		return v, err
	}
}

// opener returns the storekit.TxOpener of DoTx or StepTx (op names it in
// errors): a runner on the Guard's store, which must be a *Store.
func opener(op string) storekit.TxOpener {
	return func(s storekit.Store) (storekit.TxRunner, error) {
		st, ok := s.(*Store)
		if !ok || st == nil {
			return nil, &storekit.OptionError{Option: op, Reason: fmt.Sprintf("the Guard's store is %T, not a *dynamostore.Store", s)}
		}
		if err := st.Validate(); err != nil {
			return nil, err
		}
		if op == "DoTx" && st.cfg.oneRequest {
			return &callRunner{txRunner: txRunner{st: st}}, nil
		}
		return txRunner{st: st}, nil
	}
}

// txRunner is DoTx's and StepTx's storekit.TxRunner: fn's items and the
// completion of the record, conditioned on the claim's nonce, in one
// TransactWriteItems.
type txRunner struct{ st *Store }

type txCtxKey struct{}

// RunTx runs body with a Tx in its context and sends the items it added
// with the completion it returned (see storekit.TxRunner for what it
// returns).
func (r txRunner) RunTx(ctx context.Context, c storekit.TxClaim, body func(context.Context) (storekit.Completion, error)) error {
	k, err := r.st.begin("commit", c.Key, storekit.ValidateOwner(c.Key, c.Nonce))
	if err != nil {
		return err
	}
	tx := &Tx{st: r.st, pk: k}
	comp, err := body(context.WithValue(ctx, txCtxKey{}, tx))
	if err != nil {
		return err
	}
	items, kinds, _ := tx.finish()
	return r.st.commit(ctx, k, c.Nonce, comp, items, kinds)
}

// txConflictTries bounds how often a transaction cancelled only by
// concurrent transactions is sent again.
const txConflictTries = 4

// commit sends fn's items and the completion of the record behind k,
// conditioned on nonce, in one TransactWriteItems; see DoTx for what it
// returns.
func (st *Store) commit(ctx context.Context, k map[string]types.AttributeValue, nonce string, comp storekit.Completion, items []types.TransactWriteItem, kinds []string) error {
	if err := storekit.ValidateCompletion(comp); err != nil {
		return fmt.Errorf("dynamostore: commit: %w", err)
	}
	return st.sendTx(ctx, txSend{
		items: items, kinds: kinds, nonce: nonce,
		record: func(token string) types.TransactWriteItem {
			return types.TransactWriteItem{Update: st.completionUpdate(k, nonce, token, comp)}
		},
		// Whatever the error, an attempt of this request (the SDK
		// retries with the same token) may have applied or may still
		// arrive: settle it.
		unknown: func(token string, err error) error { return st.fence(ctx, k, nonce, token, err) },
	})
}

// txSend is a transaction of fn's items with the record's write last.
type txSend struct {
	items  []types.TransactWriteItem
	kinds  []string
	nonce  string                                     // the claim the record's write is conditioned on
	record func(token string) types.TransactWriteItem // the record's write, in the send with token
	// unknown settles a send with token whose outcome is unknown (err,
	// not a cancellation).
	unknown func(token string, err error) error
	// refused, when set, answers a cancellation by the record's own
	// condition (the item it carries, ALL_OLD) before canceled reads it.
	refused func(item map[string]types.AttributeValue) error
}

// sendTx sends t, with a new ClientRequestToken each time, again while
// only concurrent transactions cancel it (txConflictTries).
func (st *Store) sendTx(ctx context.Context, t txSend) error {
	var last error
	for try := range txConflictTries {
		if try > 0 {
			if err := sleepCtx(ctx, time.Duration(10<<try)*time.Millisecond); err != nil {
				return errors.Join(last, err)
			}
		}
		token := txToken()
		all := make([]types.TransactWriteItem, 0, len(t.items)+1)
		all = append(append(all, t.items...), t.record(token))
		_, err := st.client.TransactWriteItems(ctx, &dynamodb.TransactWriteItemsInput{
			TransactItems:      all,
			ClientRequestToken: aws.String(token),
		})
		if err == nil {
			return nil
		}
		var tce *types.TransactionCanceledException
		if !errors.As(err, &tce) {
			return t.unknown(token, err)
		}
		if rs := tce.CancellationReasons; t.refused != nil && len(rs) == len(t.items)+1 &&
			aws.ToString(rs[len(t.items)].Code) == "ConditionalCheckFailed" {
			return t.refused(rs[len(t.items)].Item)
		}
		verdict, cerr := st.canceled(tce, t.nonce, t.items, t.kinds)
		switch verdict {
		case txCommitted:
			return nil
		case txRetry:
			last = cerr
			continue
		default:
			return cerr
		}
	}
	return last
}

type txVerdict int

const (
	txFailed    txVerdict = iota // nothing applied; the error says why
	txCommitted                  // an earlier send of this claim's transaction applied
	txRetry                      // cancelled by concurrent transactions only
)

// canceled reads a cancelled transaction's reasons (fn's items first, the
// record last).
func (st *Store) canceled(tce *types.TransactionCanceledException, nonce string, items []types.TransactWriteItem, kinds []string) (txVerdict, error) {
	reasons := tce.CancellationReasons
	if len(reasons) != len(items)+1 {
		return txFailed, fmt.Errorf("dynamostore: commit: %w", tce)
	}
	rec := reasons[len(items)]
	switch aws.ToString(rec.Code) {
	case "ConditionalCheckFailed":
		if completedBy(rec.Item, nonce) {
			// This claim's record is already completed: an earlier send
			// of this transaction (a retry the SDK made) applied.
			return txCommitted, nil
		}
		return txFailed, lost("commit")
	case "", "None", "TransactionConflict":
	default:
		return txFailed, fmt.Errorf("dynamostore: commit: the call's record: %w", tce)
	}
	conflictOnly := true
	first := -1
	for i, r := range reasons[:len(items)] {
		switch aws.ToString(r.Code) {
		case "", "None":
			continue
		case "TransactionConflict":
		default:
			conflictOnly = false
		}
		if first < 0 || (aws.ToString(reasons[first].Code) == "TransactionConflict" && aws.ToString(r.Code) != "TransactionConflict") {
			first = i
		}
	}
	if aws.ToString(rec.Code) == "TransactionConflict" && first < 0 {
		return txRetry, fmt.Errorf("dynamostore: commit: the call's record: %w", tce)
	}
	if first < 0 {
		return txFailed, fmt.Errorf("dynamostore: commit: %w", tce)
	}
	e := &TxCanceledError{
		Index: first, Kind: kinds[first], Table: itemTable(items[first]),
		Code: aws.ToString(reasons[first].Code), Message: aws.ToString(reasons[first].Message),
		Item: reasons[first].Item, Reasons: reasons[:len(items)], Err: tce,
	}
	if conflictOnly {
		return txRetry, e
	}
	return txFailed, e
}

func itemTable(it types.TransactWriteItem) string {
	switch {
	case it.Put != nil:
		return aws.ToString(it.Put.TableName)
	case it.Update != nil:
		return aws.ToString(it.Update.TableName)
	case it.Delete != nil:
		return aws.ToString(it.Delete.TableName)
	case it.ConditionCheck != nil:
		return aws.ToString(it.ConditionCheck.TableName)
	}
	return ""
}

// attrFence is the record attribute a fence writes: the token of the
// transaction it excludes.
const attrFence = "tx_fence"

// completionUpdate is the record's completion inside the transaction with
// token: Complete's update, conditioned on the nonce, on the record being
// in progress (a second application finds it completed) and on no fence
// for token (see fence).
func (st *Store) completionUpdate(k map[string]types.AttributeValue, nonce, token string, c storekit.Completion) *types.Update {
	now := st.nowMs()
	exp := now + c.TTL.Milliseconds()
	vals := make(map[string]types.AttributeValue, 10)
	vals[":st"], vals[":now"], vals[":exp"] = statusValue(c.Status), attrN(now), attrN(exp)
	vals[":ttl"], vals[":n"], vals[":ip"], vals[":tok"] = attrN(st.ttlAt(exp)), attrS(nonce), inProgressValue, attrS(token)
	hasResult, hasError := 0, 0
	if c.Result != nil {
		hasResult = 1
		vals[":res"] = attrB(c.Result)
	}
	if c.Error != nil {
		hasError = 1
		vals[":em"], vals[":et"] = attrS(c.Error.Message), attrS(c.Error.Type)
	}
	names := make(map[string]string, len(completeNames)+1)
	for p, a := range completeNames {
		names[p] = a
	}
	names["#txf"] = attrFence
	return &types.Update{
		TableName:                           &st.table,
		Key:                                 k,
		UpdateExpression:                    &exprComplete[hasResult][hasError],
		ConditionExpression:                 aws.String("#n = :n AND #st = :ip AND (attribute_not_exists(#txf) OR #txf <> :tok)"),
		ExpressionAttributeNames:            names,
		ExpressionAttributeValues:           vals,
		ReturnValuesOnConditionCheckFailure: types.ReturnValuesOnConditionCheckFailureAllOld,
	}
}

// completedBy reports whether item is a record completed by the claim
// with nonce (only a transaction of that claim completes it with that
// nonce; Complete is not used by DoTx).
func completedBy(item map[string]types.AttributeValue, nonce string) bool {
	n, err := strAttr(item, attrNonce)
	if err != nil || n != nonce {
		return false
	}
	st, err := strAttr(item, attrStatus)
	return err == nil && st == string(storekit.StatusCompleted)
}

// fenceTries bounds the fence's attempts after a transaction's lost reply.
const fenceTries = 6

// fence settles a transaction sent with token whose outcome is unknown
// (sendErr): a conditional update that writes token into the record while
// the record still carries nonce in progress. Once it applied, the
// transaction can never apply (its condition excludes the fence), so
// nothing was committed; if it is refused, the record says what happened.
func (st *Store) fence(ctx context.Context, k map[string]types.AttributeValue, nonce, token string, sendErr error) error {
	// The caller's ctx may be what cut the transaction short: the fence
	// runs on its own bounded context.
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	var last error
	for try := range fenceTries {
		if try > 0 {
			if err := sleepCtx(fctx, time.Duration(50<<try)*time.Millisecond); err != nil {
				break
			}
		}
		_, err := st.client.UpdateItem(fctx, &dynamodb.UpdateItemInput{
			TableName:                           &st.table,
			Key:                                 k,
			UpdateExpression:                    aws.String("SET #txf = :tok"),
			ConditionExpression:                 aws.String("#n = :n AND #st = :ip"),
			ExpressionAttributeNames:            map[string]string{"#txf": attrFence, "#n": attrNonce, "#st": attrStatus},
			ExpressionAttributeValues:           map[string]types.AttributeValue{":tok": attrS(token), ":n": attrS(nonce), ":ip": inProgressValue},
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
		if completedBy(old, nonce) {
			return nil // the transaction applied
		}
		return lost("commit")
	}
	return &storekit.OutcomeUnknownError{Err: sendErr, ReadErr: last}
}

// txToken is a fresh ClientRequestToken (at most 36 characters).
func txToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
