package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
)

// readmeStep is one command of a console block of README.md and the output
// the README shows for it.
type readmeStep struct {
	command    string // shell text, continuation lines joined
	background bool   // ends with &: its output is not shown
	want       []string
}

// readmeSteps returns the curl commands of README.md's console blocks, in
// order, each with the output lines shown under it.
func readmeSteps(t *testing.T) []readmeStep {
	t.Helper()
	f, err := os.Open("README.md")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var steps []readmeStep
	inBlock, continued := false, false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case line == "```console":
			inBlock = true
		case inBlock && line == "```":
			inBlock = false
		case !inBlock:
		case continued:
			s := &steps[len(steps)-1]
			s.command += " " + strings.TrimSpace(strings.TrimSuffix(line, `\`))
			continued = strings.HasSuffix(line, `\`)
		case strings.HasPrefix(line, "$ "):
			steps = append(steps, readmeStep{command: strings.TrimSuffix(line[2:], `\`)})
			continued = strings.HasSuffix(line, `\`)
		default:
			s := &steps[len(steps)-1]
			s.want = append(s.want, line)
		}
	}
	for i := range steps {
		if c, ok := strings.CutSuffix(strings.TrimSpace(steps[i].command), " &"); ok {
			steps[i].command, steps[i].background = c, true
		}
	}
	return steps
}

var (
	paymentID = regexp.MustCompile(`pay_[0-9a-f]{12}`)
	created   = regexp.MustCompile(`"created":"[^"]*"`)
)

// normalize replaces what differs from run to run (payment ids, times).
func normalize(s string) string {
	return created.ReplaceAllString(paymentID.ReplaceAllString(s, "pay_ID"), `"created":"TIME"`)
}

// TestREADME runs every curl command of README.md, as written, against the
// server, and checks that it answers what the README shows: the status
// line, every header shown (but Date), and the body (payment ids and times
// aside).
func TestREADME(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("curl not installed")
	}
	gate := make(chan struct{})
	addrc := make(chan string, 1)
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() {
		errc <- run(ctx, config{addr: "127.0.0.1:0", dir: t.TempDir(), delay: time.Millisecond,
			gate: func(key string) {
				if key == `"order-1002"` { // the charge of step 3, held while its duplicate arrives
					<-gate
				}
			},
			ready: func(a string) { addrc <- a }})
	}()
	var base string
	select {
	case a := <-addrc:
		base = "http://" + a
	case err := <-errc:
		t.Fatal(err)
	}
	defer func() {
		cancel()
		if err := <-errc; err != nil {
			t.Errorf("run: %v", err)
		}
	}()
	inFlight := func() int {
		resp, err := http.Get(base + "/stats")
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var s struct {
			InFlight int `json:"in_flight"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
			t.Fatal(err)
		}
		return s.InFlight
	}

	steps := readmeSteps(t)
	if len(steps) < 8 {
		t.Fatalf("README.md has %d curl commands, want the walk-through's 8 at least", len(steps))
	}
	gateOpen := false
	var background []chan struct{}
	for i, st := range steps {
		cmdText := strings.ReplaceAll(st.command, "http://127.0.0.1:8080", base)
		if !strings.HasPrefix(cmdText, "curl ") || cmdText == st.command {
			t.Fatalf("step %d: not a curl command against the server: %s", i+1, st.command)
		}
		if st.background {
			// The charge is held at the gate: the next command is the
			// duplicate that arrives while it runs.
			done := make(chan struct{})
			background = append(background, done)
			go func() {
				defer close(done)
				if out, err := exec.Command("sh", "-c", cmdText).CombinedOutput(); err != nil {
					t.Errorf("step %d: %v: %s", i+1, err, out)
				}
			}()
			for deadline := time.Now().Add(10 * time.Second); inFlight() != 1; time.Sleep(5 * time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("step %d never started", i+1)
				}
			}
			continue
		}
		// Bounded, so that a server that holds the duplicate (a wait
		// instead of the 409) fails the step instead of hanging the test.
		cctx, ccancel := context.WithTimeout(ctx, 10*time.Second)
		cmd := exec.CommandContext(cctx, "sh", "-c", cmdText)
		cmd.WaitDelay = time.Second // curl, sh's child, holds the pipe
		out, err := cmd.Output()
		ccancel()
		if err != nil {
			if !gateOpen && len(background) > 0 {
				close(gate)
				gateOpen = true
			}
			t.Fatalf("step %d: %s: %v", i+1, cmdText, err)
		}
		if len(background) > 0 && !gateOpen {
			close(gate) // let the held charge complete
			gateOpen = true
			for _, d := range background {
				<-d
			}
		}
		got := strings.Split(strings.ReplaceAll(string(out), "\r\n", "\n"), "\n")
		check(t, i+1, st, got)
	}
	if !gateOpen {
		close(gate)
	}
}

// check compares a command's output with the README's: the first line, each
// header line shown (not Date), and the last non-empty line (the body).
func check(t *testing.T, step int, st readmeStep, got []string) {
	t.Helper()
	want := st.want
	if len(want) == 0 {
		t.Fatalf("step %d (%s): the README shows no output", step, st.command)
	}
	last := func(lines []string) string {
		for i := len(lines) - 1; i >= 0; i-- {
			if lines[i] != "" {
				return lines[i]
			}
		}
		return ""
	}
	if normalize(last(got)) != normalize(last(want)) {
		t.Errorf("step %d (%s): body\n got %s\nwant %s", step, st.command, last(got), last(want))
	}
	if !strings.HasPrefix(want[0], "HTTP/") {
		return // curl -s: the body only
	}
	if got[0] != want[0] {
		t.Errorf("step %d (%s): status line %q, README shows %q", step, st.command, got[0], want[0])
	}
	headers := map[string]bool{}
	for _, l := range got[1:] {
		if l == "" {
			break
		}
		headers[normalize(l)] = true
	}
	for _, l := range want[1:] {
		if l == "" || l == "..." { // "..." stands for the headers not shown, then the body
			break
		}
		if strings.HasPrefix(l, "Date: ") {
			continue
		}
		if !headers[normalize(l)] {
			t.Errorf("step %d (%s): README shows header %q, the server did not send it (sent %q)", step, st.command, l, got)
		}
	}
}
