package main

import (
	"fmt"
	"runtime/debug"
)

const versionAbout = `Prints the version of idem: the version of its module
(github.com/idem-go/idem/cmd) as installed with go install ...@VERSION, or
(devel) for a build from a working tree, and the Go version it was built with.
`

// version returns the version of the command's module from the build
// information, or "(devel)" when there is none (a build from a working
// tree, or a binary built without module support).
func version(info *debug.BuildInfo, ok bool) string {
	if !ok || info == nil || info.Main.Version == "" {
		return "(devel)"
	}
	return info.Main.Version
}

func (c *cli) versionCmd(args []string) int {
	fs := c.newFlagSet("version", "idem version", versionAbout)
	if code, done := c.parseNoArgs(fs, args); done {
		return code
	}
	info, ok := debug.ReadBuildInfo()
	goVersion := ""
	if ok && info != nil {
		goVersion = " " + info.GoVersion
	}
	fmt.Fprintf(c.stdout, "idem %s%s\n", version(info, ok), goVersion)
	return exitOK
}
