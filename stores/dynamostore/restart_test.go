package dynamostore_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/idem-go/idem"
	"github.com/idem-go/idem/stores/dynamostore"
)

const (
	envRestartChild    = "IDEM_RESTART_CHILD" // hold or try
	envRestartEndpoint = "IDEM_RESTART_ENDPOINT"
	envRestartPrefix   = "IDEM_RESTART_PREFIX"
	envRestartKey      = "IDEM_RESTART_KEY"
	envRestartInstance = "IDEM_RESTART_INSTANCE"
)

// TestRestartHelperProcess is a child process with a Guard of default
// options (a 30s takeover threshold) and the instance ID it is given:
// "hold" calls Do with an fn that prints "claimed <fencing token>" and
// blocks until the process is killed; "try" calls Do once and prints
// "ran <fencing token> <ms>" or "in-progress <ms>" or "error <err>", ms
// being how long Do took.
func TestRestartHelperProcess(t *testing.T) {
	mode := os.Getenv(envRestartChild)
	if mode == "" {
		t.Skip("child process only")
	}
	client := newClient(clientConfig{endpoint: os.Getenv(envRestartEndpoint)})
	s := mustNew(t, client, testTable, dynamostore.WithKeyPrefix(os.Getenv(envRestartPrefix)))
	g := newGuard[string](t, s, idem.WithInstanceID(os.Getenv(envRestartInstance)))
	key := os.Getenv(envRestartKey)
	start := time.Now()
	_, err := g.Do(context.Background(), key, func(ctx context.Context) (string, error) {
		tok, _ := idem.FencingToken(ctx)
		if mode == "hold" {
			fmt.Println("claimed", tok)
			select {}
		}
		fmt.Println("ran", tok, time.Since(start).Milliseconds())
		return "ok", nil
	})
	switch {
	case errors.Is(err, idem.ErrInProgress):
		fmt.Println("in-progress", time.Since(start).Milliseconds())
	case err != nil:
		fmt.Println("error", err)
	}
}

// restartChild starts a child process of mode with instance id on key and
// returns its first line of output (within a minute).
func restartChild(t *testing.T, e *env, mode, id, key string) (*exec.Cmd, string) {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRestartHelperProcess$", "-test.count=1")
	cmd.Env = append(os.Environ(), envRestartChild+"="+mode, envRestartEndpoint+"="+e.endpoint,
		envRestartPrefix+"="+e.prefix, envRestartKey+"="+key, envRestartInstance+"="+id)
	cmd.Stderr = os.Stderr
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- strings.TrimSpace(l)
	}()
	select {
	case l := <-line:
		return cmd, l
	case <-time.After(time.Minute):
		t.Fatalf("%s child printed nothing in a minute", mode)
		return nil, ""
	}
}

// TestRestartedInstanceTakesOverAtOnce: a process with instance ID id
// holds a claim under the default 30s takeover threshold and is SIGKILLed.
// A process with another instance ID finds the claim in progress; a new
// process with id (a restart) takes it over at once on its first call and
// runs fn with fencing token 2, well before the threshold.
func TestRestartedInstanceTakesOverAtOnce(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	e := newEnv(t)
	id := "i-" + randHex(6)
	key := "restart-" + randHex(6)
	holder, line := restartChild(t, e, "hold", id, key)
	if line != "claimed 1" {
		t.Fatalf("holder: %q", line)
	}
	if err := holder.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = holder.Wait()
	killed := time.Now()

	if _, line := restartChild(t, e, "try", "i-"+randHex(6), key); !strings.HasPrefix(line, "in-progress ") {
		t.Fatalf("another instance: %q, want in-progress", line)
	}
	_, line = restartChild(t, e, "try", id, key)
	since := time.Since(killed)
	var tok, ms int64
	if _, err := fmt.Sscanf(line, "ran %d %d", &tok, &ms); err != nil || tok != 2 {
		t.Fatalf("restarted instance: %q, want fn run with fencing token 2", line)
	}
	if since > 10*time.Second {
		t.Fatalf("the restart ran fn %v after the kill: the takeover waited (threshold 30s)", since)
	}
	t.Logf("the restarted instance ran fn %d ms into its Do, %v after the kill (threshold 30s)", ms, since.Round(time.Millisecond))
	sk, err := newGuard[string](t, e.store).StorageKey(key)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := e.store.Get(context.Background(), sk)
	if err != nil || rec.Attempt != 2 || !strings.HasPrefix(rec.Owner, id+"/") {
		t.Fatalf("record after the restart: %+v, %v", rec, err)
	}
}
