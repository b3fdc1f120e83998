// Command keydoc writes the compose key table of packs, the reference
// page generated from the loader's own table (make docs runs it).
package main

import (
	"fmt"
	"os"

	"github.com/custody-dev/custody/pack"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: keydoc PAGE.md")
		os.Exit(64)
	}
	if err := os.WriteFile(os.Args[1], pack.KeyTableMarkdown(), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "keydoc:", err)
		os.Exit(1)
	}
}
