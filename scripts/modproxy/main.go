// Command modproxy checks the module layout of the repository and builds a
// module proxy from it: a directory that GOPROXY=file://DIR serves, with
// each module's .mod, .info and .zip at one version, as a real proxy would
// serve them once the modules are tagged.
//
//	go run ./scripts/modproxy -version v0.1.0 -check
//	go run ./scripts/modproxy -version v0.1.0 -out DIR          # from the working tree
//	go run ./scripts/modproxy -version v0.1.0 -out DIR -rev HEAD # from a commit
//	go run ./scripts/modproxy -version v0.1.0 -list             # "path dir" of every published module
//	go run ./scripts/modproxy -set-version v0.2.0               # rewrite the sibling requirements and go.work
//
// The modules are the use lines of go.work. The check (always run first)
// refuses a replace directive in any go.mod, a go directive that differs
// from go.work's, a requirement on a module of the repository at another
// version than -version, a go.work replace line at another version, and a
// required module without a go.work replace line (-set-version adds the
// missing ones). A
// go.mod whose first line is a comment starting "Not published" is built
// into the proxy but left out of -list (and so never tagged).
//
// The working tree's files are those git tracks plus untracked files it
// does not ignore, so what the proxy serves is what a commit of the tree
// would publish. The zips are made with golang.org/x/mod/zip, which checks
// them as the go command does.
package main

import (
	"archive/zip"
	"bytes"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	"golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	modzip "golang.org/x/mod/zip"
)

type mod struct {
	Path      string // module path
	Dir       string // directory relative to the repository root ("." for the root)
	File      *modfile.File
	Data      []byte // go.mod as it is
	Published bool
}

func main() {
	version := flag.String("version", "", "the version every module is built at and required at (vX.Y.Z)")
	out := flag.String("out", "", "write the module proxy to this directory")
	rev := flag.String("rev", "", "build the zips from this git revision instead of the working tree")
	check := flag.Bool("check", false, "only check the module layout")
	list := flag.Bool("list", false, `print "path dir" of every published module`)
	setVersion := flag.String("set-version", "", "rewrite every requirement on a module of the repository, and go.work's replace lines, to this version")
	flag.Parse()
	if err := run(*version, *out, *rev, *check, *list, *setVersion); err != nil {
		fmt.Fprintln(os.Stderr, "modproxy:", err)
		os.Exit(1)
	}
}

func run(version, out, rev string, check, list bool, setVersion string) error {
	root, err := gitOutput(".", "rev-parse", "--show-toplevel")
	if err != nil {
		return err
	}
	root = strings.TrimSpace(root)
	work, mods, err := load(root)
	if err != nil {
		return err
	}
	if setVersion != "" {
		return rewrite(root, work, mods, setVersion)
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-version %q: want a canonical semantic version such as v0.1.0", version)
	}
	if err := checkLayout(work, mods, version); err != nil {
		return err
	}
	switch {
	case list:
		for _, m := range mods {
			if m.Published {
				fmt.Println(m.Path, m.Dir)
			}
		}
		return nil
	case check:
		fmt.Printf("modproxy: %d modules, go %s, siblings required at %s, no replace directive\n", len(mods), work.Go.Version, version)
		return nil
	case out == "":
		return errors.New("nothing to do: give -out DIR, -check, -list or -set-version")
	}
	return build(root, mods, version, out, rev)
}

// load reads go.work and the go.mod of every module it uses.
func load(root string) (*modfile.WorkFile, []*mod, error) {
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return nil, nil, err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return nil, nil, err
	}
	if work.Go == nil {
		return nil, nil, errors.New("go.work has no go directive")
	}
	var mods []*mod
	for _, u := range work.Use {
		dir := path.Clean(filepath.ToSlash(u.Path))
		name := path.Join(dir, "go.mod")
		data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
		if err != nil {
			return nil, nil, err
		}
		f, err := modfile.Parse(name, data, nil)
		if err != nil {
			return nil, nil, err
		}
		if f.Module == nil {
			return nil, nil, fmt.Errorf("%s: no module line", name)
		}
		mods = append(mods, &mod{
			Path: f.Module.Mod.Path, Dir: dir, File: f, Data: data,
			Published: !notPublished(data),
		})
	}
	sort.Slice(mods, func(i, j int) bool { return mods[i].Path < mods[j].Path })
	return work, mods, nil
}

func notPublished(gomod []byte) bool {
	first, _, _ := bytes.Cut(gomod, []byte("\n"))
	return bytes.HasPrefix(bytes.TrimSpace(first), []byte("// Not published"))
}

// checkLayout reports every way the modules would not install from a proxy
// at version.
func checkLayout(work *modfile.WorkFile, mods []*mod, version string) error {
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.Path] = true
	}
	var errs []error
	for _, m := range mods {
		name := path.Join(m.Dir, "go.mod")
		for _, r := range m.File.Replace {
			errs = append(errs, fmt.Errorf("%s: replace %s: a published go.mod has no replace directive (go.work wires the tree)", name, r.Old.Path))
		}
		if m.File.Go == nil || m.File.Go.Version != work.Go.Version {
			got := "none"
			if m.File.Go != nil {
				got = m.File.Go.Version
			}
			errs = append(errs, fmt.Errorf("%s: go %s, want go %s as in go.work", name, got, work.Go.Version))
		}
		for _, r := range m.File.Require {
			switch {
			case ours[r.Mod.Path] && r.Mod.Version != version:
				errs = append(errs, fmt.Errorf("%s: requires %s %s, want %s", name, r.Mod.Path, r.Mod.Version, version))
			case !ours[r.Mod.Path] && strings.HasPrefix(r.Mod.Path, "github.com/idem-go/"):
				errs = append(errs, fmt.Errorf("%s: requires %s, which is not a module of go.work", name, r.Mod.Path))
			}
		}
	}
	replaced := map[string]bool{}
	for _, r := range work.Replace {
		if ours[r.Old.Path] && r.Old.Version != version {
			errs = append(errs, fmt.Errorf("go.work: replace %s %s, want version %s", r.Old.Path, r.Old.Version, version))
		}
		replaced[r.Old.Path] = true
	}
	// A module another one requires needs a replace line in go.work: a use
	// line alone leaves the required version in the module graph, and the
	// go command then looks for it on the proxy.
	for _, m := range mods {
		for _, r := range m.File.Require {
			if ours[r.Mod.Path] && !replaced[r.Mod.Path] {
				errs = append(errs, fmt.Errorf("go.work: no replace line for %s, which %s requires (go run ./scripts/modproxy -set-version %s adds it)", r.Mod.Path, m.Path, version))
				replaced[r.Mod.Path] = true
			}
		}
	}
	return errors.Join(errs...)
}

// rewrite sets every requirement on a module of the repository, and
// go.work's replace lines, to version.
func rewrite(root string, work *modfile.WorkFile, mods []*mod, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("-set-version %q: want a canonical semantic version such as v0.2.0", version)
	}
	ours := map[string]bool{}
	for _, m := range mods {
		ours[m.Path] = true
	}
	for _, m := range mods {
		changed := false
		for _, r := range m.File.Require {
			if ours[r.Mod.Path] && r.Mod.Version != version {
				if err := m.File.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
				changed = true
			}
		}
		if !changed {
			continue
		}
		data, err := m.File.Format()
		if err != nil {
			return err
		}
		if err := os.WriteFile(filepath.Join(root, filepath.FromSlash(m.Dir), "go.mod"), data, 0o644); err != nil {
			return err
		}
	}
	replaced := map[string]bool{}
	for _, r := range append([]*modfile.Replace(nil), work.Replace...) {
		replaced[r.Old.Path] = true
		if !ours[r.Old.Path] || r.Old.Version == version {
			continue
		}
		if err := work.DropReplace(r.Old.Path, r.Old.Version); err != nil {
			return err
		}
		if err := work.AddReplace(r.Old.Path, version, r.New.Path, r.New.Version); err != nil {
			return err
		}
	}
	// Every module of the workspace gets a replace line at version.
	for _, m := range mods {
		if replaced[m.Path] {
			continue
		}
		dir := m.Dir
		if dir != "." {
			dir = "./" + dir
		}
		if err := work.AddReplace(m.Path, version, dir, ""); err != nil {
			return err
		}
	}
	work.Cleanup()
	return os.WriteFile(filepath.Join(root, "go.work"), modfile.Format(work.Syntax), 0o644)
}

// build writes the proxy: for every module, its list, .info, .mod and .zip.
func build(root string, mods []*mod, version, out, rev string) error {
	src := root
	stamp := time.Now().UTC()
	var files []string
	if rev != "" {
		tmp, err := os.MkdirTemp("", "modproxy-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		src = tmp
		if files, stamp, err = exportRevision(root, rev, tmp, mods); err != nil {
			return err
		}
	} else {
		ls, err := gitOutput(root, "ls-files", "-z", "--cached", "--others", "--exclude-standard")
		if err != nil {
			return err
		}
		files = splitZ(ls)
	}
	// Every directory holding a go.mod starts a module of its own; the
	// files under it belong to that module only (as the go command sees it).
	modDirs := map[string]bool{}
	for _, f := range files {
		if path.Base(f) == "go.mod" {
			modDirs[path.Dir(f)] = true
		}
	}
	for _, m := range mods {
		mfiles, err := moduleFiles(src, m, files, modDirs)
		if err != nil {
			return err
		}
		if err := writeModule(out, m, version, stamp, mfiles); err != nil {
			return fmt.Errorf("%s: %w", m.Path, err)
		}
	}
	fmt.Printf("modproxy: %d modules at %s in %s\n", len(mods), version, out)
	return nil
}

// exportRevision writes the files of revision rev of the repository at
// root into dir and returns their names and the revision's commit time.
// Each module's go.mod (m.Data) becomes the revision's, not the working
// tree's.
func exportRevision(root, rev, dir string, mods []*mod) (files []string, stamp time.Time, err error) {
	if err := exportRev(root, rev, dir); err != nil {
		return nil, time.Time{}, err
	}
	ls, err := gitOutput(root, "ls-tree", "-r", "-z", "--name-only", rev)
	if err != nil {
		return nil, time.Time{}, err
	}
	files = splitZ(ls)
	ct, err := gitOutput(root, "show", "-s", "--format=%ct", rev)
	if err != nil {
		return nil, time.Time{}, err
	}
	stamp = time.Now().UTC()
	var sec int64
	if _, err := fmt.Sscan(strings.TrimSpace(ct), &sec); err == nil {
		stamp = time.Unix(sec, 0).UTC()
	}
	for _, m := range mods {
		data, err := os.ReadFile(filepath.Join(dir, filepath.FromSlash(m.Dir), "go.mod"))
		if err != nil {
			return nil, time.Time{}, fmt.Errorf("%s: %s/go.mod: %w", rev, m.Dir, err)
		}
		m.Data = data
	}
	return files, stamp, nil
}

// moduleFiles returns the files of module m among files (relative to
// src, the repository's tree): the regular files under its directory and
// in no module below it (modDirs), and, as the go command does when it
// zips a module from a repository, the root's LICENSE for a module in a
// subdirectory without one.
func moduleFiles(src string, m *mod, files []string, modDirs map[string]bool) ([]modzip.File, error) {
	var mfiles []modzip.File
	for _, f := range files {
		rel, ok := within(m.Dir, f)
		if !ok || owner(f, modDirs) != m.Dir {
			continue
		}
		full := filepath.Join(src, filepath.FromSlash(f))
		fi, err := os.Lstat(full)
		if errors.Is(err, fs.ErrNotExist) {
			continue // deleted in the working tree, not yet committed
		}
		if err != nil {
			return nil, err
		}
		if !fi.Mode().IsRegular() {
			continue
		}
		mfiles = append(mfiles, file{rel: rel, full: full})
	}
	if m.Dir != "." && !hasFile(mfiles, "LICENSE") {
		if lic := filepath.Join(src, "LICENSE"); regular(lic) {
			mfiles = append(mfiles, file{rel: "LICENSE", full: lic})
		}
	}
	return mfiles, nil
}

func writeModule(out string, m *mod, version string, stamp time.Time, files []modzip.File) error {
	esc, err := module.EscapePath(m.Path)
	if err != nil {
		return err
	}
	dir := filepath.Join(out, filepath.FromSlash(esc), "@v")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := modzip.Create(&buf, module.Version{Path: m.Path, Version: version}, files); err != nil {
		return err
	}
	if err := checkZip(buf.Bytes(), m, version); err != nil {
		return err
	}
	info, _ := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, stamp})
	for name, data := range map[string][]byte{
		version + ".zip":  buf.Bytes(),
		version + ".mod":  m.Data,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// checkZip makes sure the zip's go.mod is the .mod served beside it.
func checkZip(b []byte, m *mod, version string) error {
	zr, err := zip.NewReader(bytes.NewReader(b), int64(len(b)))
	if err != nil {
		return err
	}
	want := m.Path + "@" + version + "/go.mod"
	for _, f := range zr.File {
		if f.Name != want {
			continue
		}
		rc, err := f.Open()
		if err != nil {
			return err
		}
		data, err := io.ReadAll(rc)
		rc.Close()
		if err != nil {
			return err
		}
		if !bytes.Equal(data, m.Data) {
			return errors.New("the zip's go.mod differs from the .mod")
		}
		return nil
	}
	return errors.New("the zip has no go.mod")
}

// within reports whether f lies in dir and returns its path relative to dir.
func within(dir, f string) (string, bool) {
	if dir == "." {
		return f, true
	}
	rel, ok := strings.CutPrefix(f, dir+"/")
	return rel, ok
}

// owner is the innermost module directory holding file f.
func owner(f string, modDirs map[string]bool) string {
	for d := path.Dir(f); ; d = path.Dir(d) {
		if modDirs[d] {
			return d
		}
		if d == "." || d == "/" {
			return "."
		}
	}
}

func hasFile(files []modzip.File, name string) bool {
	for _, f := range files {
		if f.Path() == name {
			return true
		}
	}
	return false
}

func regular(name string) bool {
	fi, err := os.Lstat(name)
	return err == nil && fi.Mode().IsRegular()
}

type file struct{ rel, full string }

func (f file) Path() string                 { return f.rel }
func (f file) Lstat() (os.FileInfo, error)  { return os.Lstat(f.full) }
func (f file) Open() (io.ReadCloser, error) { return os.Open(f.full) }

func exportRev(root, rev, dst string) error {
	archive := exec.Command("git", "-C", root, "archive", "--format=tar", rev)
	untar := exec.Command("tar", "-x", "-C", dst)
	pipe, err := archive.StdoutPipe()
	if err != nil {
		return err
	}
	untar.Stdin = pipe
	archive.Stderr, untar.Stderr = os.Stderr, os.Stderr
	if err := untar.Start(); err != nil {
		return err
	}
	if err := archive.Run(); err != nil {
		return fmt.Errorf("git archive %s: %w", rev, err)
	}
	return untar.Wait()
}

func gitOutput(dir string, args ...string) (string, error) {
	cmd := exec.Command("git", append([]string{"-C", dir}, args...)...)
	cmd.Stderr = os.Stderr
	b, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("git %s: %w", strings.Join(args, " "), err)
	}
	return string(b), nil
}

func splitZ(s string) []string {
	var out []string
	for _, f := range strings.Split(s, "\x00") {
		if f != "" {
			out = append(out, f)
		}
	}
	return out
}
