package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestParentDeathWrapperQuotesPaths runs a wrapper written into a directory
// whose path holds a space and a quote, around a program of such a path, and
// sees every argument reach the program unchanged, under setpriv.
func TestParentDeathWrapperQuotesPaths(t *testing.T) {
	if _, err := exec.LookPath("setpriv"); err != nil {
		t.Fatalf("setpriv is needed on the machine: %v", err)
	}
	dir := filepath.Join(t.TempDir(), "a dir's name")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "the prog")
	// The program prints each argument on its own line.
	if err := os.WriteFile(bin, []byte("#!/bin/sh\nfor a in \"$@\"; do printf '%s\\n' \"$a\"; done\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	wdir := filepath.Join(dir, "wrappers")
	if err := os.Mkdir(wdir, 0o755); err != nil {
		t.Fatal(err)
	}
	w, err := parentDeathWrapper(wdir, bin)
	if err != nil {
		t.Fatal(err)
	}
	args := []string{"--flag=a b", "it's", "$HOME", ""}
	out, err := exec.Command(w, args...).Output()
	if err != nil {
		t.Fatalf("run the wrapper %q: %v", w, err)
	}
	if got, want := string(out), strings.Join(args, "\n")+"\n"; got != want {
		t.Fatalf("the program got arguments %q, want %q", got, want)
	}
}

// TestParentDeathWrapperWithoutSetpriv sees a clear error, naming setpriv
// and the program, when setpriv is not on PATH.
func TestParentDeathWrapperWithoutSetpriv(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	_, err := parentDeathWrapper(t.TempDir(), "/opt/bin/kube-apiserver")
	if err == nil {
		t.Fatal("no error without setpriv")
	}
	for _, want := range []string{"setpriv", "kube-apiserver"} {
		if !strings.Contains(err.Error(), want) {
			t.Fatalf("error %q does not name %s", err, want)
		}
	}
}
