package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// repoFile reads a file of the repository (the command lives in
// cmd/idem), or skips the test outside a checkout (a module zip has no
// README).
func repoFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", name))
	if os.IsNotExist(err) {
		t.Skipf("%s: not in a checkout of the repository", name)
	}
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestDocsAgree: what README.md, CONTRIBUTING.md and docs/cli.md say about
// installing, the make targets and recorded failures matches the Makefile
// and the command.
func TestDocsAgree(t *testing.T) {
	readme, contributing, cliDoc, makefile := repoFile(t, "README.md"), repoFile(t, "CONTRIBUTING.md"),
		repoFile(t, "docs/cli.md"), repoFile(t, "Makefile")

	// One version of the command to install, and a real one.
	install := regexp.MustCompile(`go install github\.com/idem-go/idem/cmd/idem@(\S+)`)
	for name, doc := range map[string]string{"README.md": readme, "docs/cli.md": cliDoc} {
		m := install.FindAllStringSubmatch(doc, -1)
		if len(m) == 0 {
			t.Errorf("%s does not say how to install the command", name)
		}
		for _, v := range m {
			if v[1] != "v0.1.0" {
				t.Errorf("%s installs cmd/idem@%s, want @v0.1.0", name, v[1])
			}
		}
	}

	// A "see X" in the README names one of its sections.
	for _, m := range regexp.MustCompile(`see ([A-Z][A-Za-z]+) for`).FindAllStringSubmatch(readme, -1) {
		if !strings.Contains(readme, "\n## "+m[1]+"\n") {
			t.Errorf("README.md says %q, and has no section %q", m[0], m[1])
		}
	}

	// make run: every program the Makefile runs is named where make run is
	// described.
	run := regexp.MustCompile(`(?m)^run:\n((?:\t.*\n)+)`).FindStringSubmatch(makefile)
	if run == nil {
		t.Fatal("the Makefile has no run target")
	}
	for _, m := range regexp.MustCompile(`go run \./(\S+)`).FindAllStringSubmatch(run[1], -1) {
		for name, doc := range map[string]string{"README.md": readme, "CONTRIBUTING.md": contributing} {
			if !strings.Contains(doc, m[1]) {
				t.Errorf("%s does not say that make run runs %s", name, m[1])
			}
		}
	}

	// make test says what it needs; make test-short exists and is offered.
	if !regexp.MustCompile(`(?m)^test-short:`).MatchString(makefile) {
		t.Error("the Makefile has no test-short target")
	}
	for name, doc := range map[string]string{"README.md": readme, "CONTRIBUTING.md": contributing} {
		for _, want := range []string{"root", "Java", "npm", "25 minutes", "make test-short"} {
			if !strings.Contains(doc, want) {
				t.Errorf("%s does not say %q about make test", name, want)
			}
		}
	}

	// A failure is recorded only under -on-failure lock.
	if !strings.Contains(cliDoc, "-on-failure lock") {
		t.Error("docs/cli.md does not say that a failure is recorded only with -on-failure lock")
	}
	// steps_epoch is a state of idem ls, and unlock refuses it.
	if !strings.Contains(cliDoc, "`steps_epoch`") || !strings.Contains(cliDoc, "refuses") {
		t.Error("docs/cli.md does not say what a steps_epoch record is and that unlock refuses it")
	}
}
