package main

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/idem-go/idem/examples/grpc-payments/paymentspb"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// readmeStep is one command of a console block of README.md and the output
// the README shows for it.
type readmeStep struct {
	args       []string // the client's arguments
	background bool     // ends with &: its output is not shown
	want       []string
}

const command = "go run ./examples/grpc-payments "

// readmeSteps returns the commands of README.md's console blocks, in
// order, each with the output lines shown under it.
func readmeSteps(t *testing.T) []readmeStep {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []readmeStep
	inBlock := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```console":
			inBlock = true
		case inBlock && line == "```":
			inBlock = false
		case !inBlock:
		case strings.HasPrefix(line, "$ "):
			cmd, ok := strings.CutPrefix(line[2:], command)
			if !ok {
				t.Fatalf("README.md: %q does not run the example", line)
			}
			cmd, bg := strings.CutSuffix(strings.TrimSpace(cmd), " &")
			steps = append(steps, readmeStep{args: strings.Fields(cmd), background: bg})
		default:
			s := &steps[len(steps)-1]
			s.want = append(s.want, line)
		}
	}
	return steps
}

var (
	paymentID = regexp.MustCompile(`pay_[0-9a-f]{12}`)
	created   = regexp.MustCompile(`created \S+`)
)

// normalize replaces what differs from run to run (payment ids, times).
func normalize(s string) string {
	return created.ReplaceAllString(paymentID.ReplaceAllString(s, "pay_ID"), "created TIME")
}

// TestREADME runs every command of README.md, as written, against the
// server, and checks that it prints what the README shows.
func TestREADME(t *testing.T) {
	gate := make(chan struct{})
	addrc := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, config{addr: "127.0.0.1:0", dir: t.TempDir(), delay: time.Millisecond,
			gate: func(key string) {
				if key == "order-1002" { // the charge of step 3, held while its duplicate arrives
					<-gate
				}
			},
			ready: func(a string) { addrc <- a }})
	}()
	var addr string
	select {
	case addr = <-addrc:
	case err := <-errc:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	inFlight := func() int64 {
		s, err := paymentspb.NewPaymentsClient(cc).Stats(ctx, &paymentspb.StatsRequest{})
		if err != nil {
			t.Fatal(err)
		}
		return s.GetInFlight()
	}

	steps := readmeSteps(t)
	if len(steps) < 11 {
		t.Fatalf("README.md has %d commands, want the walk-through's 11 at least", len(steps))
	}
	gateOpen := false
	openGate := func() {
		if !gateOpen {
			close(gate)
			gateOpen = true
		}
	}
	defer openGate()
	var background []chan struct{}
	for i, st := range steps {
		args := append(st.args[:len(st.args):len(st.args)], "-addr", addr)
		if st.background {
			// The charge is held at the gate: the next command is the
			// duplicate that arrives while it runs.
			done := make(chan struct{})
			background = append(background, done)
			go func() {
				defer close(done)
				var out bytes.Buffer
				if err := clientMain(ctx, args, &out); err != nil || !strings.HasPrefix(out.String(), "OK\n") {
					t.Errorf("step %d: %v: %s", i+1, err, out.String())
				}
			}()
			for deadline := time.Now().Add(10 * time.Second); inFlight() != 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("step %d never started", i+1)
				}
			}
			continue
		}
		var out bytes.Buffer
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		err := clientMain(cctx, args, &out)
		ccancel()
		if err != nil {
			t.Fatalf("step %d: %v: %v", i+1, st.args, err)
		}
		if len(background) > 0 && !gateOpen {
			openGate() // let the held charge complete
			for _, d := range background {
				<-d
			}
		}
		got := normalize(strings.TrimSuffix(out.String(), "\n"))
		if want := normalize(strings.Join(st.want, "\n")); got != want {
			t.Errorf("step %d (%v):\n got:\n%s\nwant:\n%s", i+1, st.args, got, want)
		}
	}
}
