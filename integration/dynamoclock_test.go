package integration

import (
	"errors"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/idem-go/idem/storekit"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/internal/dynamotest"
	"github.com/idem-go/idem/internal/testenv"
	"github.com/idem-go/idem/stores/dynamostore"
	"github.com/idem-go/idem/stores/storetest"
)

// holdingClient sends DynamoDB requests, except that once armed it holds
// the next UpdateItem until released, as a slow network would.
type holdingClient struct {
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed when a request is being held
	release chan struct{} // closed to let it go
}

func (c *holdingClient) Do(req *http.Request) (*http.Response, error) {
	c.mu.Lock()
	hold := c.armed && strings.HasSuffix(req.Header.Get("X-Amz-Target"), ".UpdateItem")
	if hold {
		c.armed = false
	}
	c.mu.Unlock()
	if hold {
		close(c.held)
		<-c.release
	}
	return http.DefaultClient.Do(req)
}

func (c *holdingClient) arm() {
	c.mu.Lock()
	c.armed, c.held, c.release = true, make(chan struct{}), make(chan struct{})
	c.mu.Unlock()
}

// TestDynamoDBHeartbeatAfterRelease: the owner's heartbeat reads its now,
// then its request is delayed; the owner's Release (one millisecond later
// on the same clock) lands first; then the heartbeat is delivered. The
// contract says a released claim is not revived by a late heartbeat: the
// heartbeat must fail with ErrLostOwnership and the key must stay
// claimable. The store decides with the caller's clock, read before the
// request is sent, so the heartbeat judges the released record with a now
// older than the release's and revives it: this is the mechanism behind the
// DynamoDB histories TestLinearizable finds illegal.
func TestDynamoDBHeartbeatAfterRelease(t *testing.T) {
	endpoint := testenv.DynamoDBEndpoint(t)
	openDynamo(t) // creates the table
	hc := &holdingClient{}
	client := dynamotest.NewLocalClient(endpoint, func(o *dynamodb.Options) { o.HTTPClient = hc })
	clock := storetest.NewClock()
	s, err := dynamostore.New(client, dynamoTable, dynamostore.WithKeyPrefix("lin"+randHex(6)+"#"), dynamostore.WithClock(clock.Now))
	if err != nil {
		t.Fatal(err)
	}
	ctx := ctxT(t)
	key := storageKey()
	if _, err := s.Claim(ctx, storekit.ClaimRequest{Key: key, Nonce: "n1", LeaseTTL: time.Minute, TakeoverAfter: time.Minute}); err != nil {
		t.Fatal(err)
	}
	hc.arm()
	hb := make(chan error, 1)
	go func() { hb <- s.Heartbeat(ctx, key, "n1", time.Minute) }()
	<-hc.held // the heartbeat has read its now and is on its way
	clock.Advance(time.Millisecond)
	if err := s.Release(ctx, key, "n1"); err != nil {
		t.Fatal(err)
	}
	close(hc.release)
	hbErr := <-hb
	rec, getErr := s.Get(ctx, key)
	if !errors.Is(hbErr, idem.ErrLostOwnership) || !errors.Is(getErr, storekit.ErrNotFound) {
		t.Fatalf("heartbeat delivered after the release: %v; then Get: %+v, %v (want ErrLostOwnership and ErrNotFound: a released claim is not revived)",
			hbErr, rec, getErr)
	}
}
