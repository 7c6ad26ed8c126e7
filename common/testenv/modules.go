package testenv

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
)

// ModuleDir returns the module cache directory of moduleAtVersion (for
// example "sigs.k8s.io/gateway-api-inference-extension@v1.0.0"),
// downloading it through the Go module proxy when it is not cached. Tests
// load other projects' CRDs from there instead of copying them.
func ModuleDir(moduleAtVersion string) (string, error) {
	cmd := exec.Command("go", "mod", "download", "-json", moduleAtVersion)
	cmd.Dir = os.TempDir()
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS=-mod=mod")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("go mod download %s: %w: %s%s", moduleAtVersion, err, stderr.String(), stdout.String())
	}
	var info struct {
		Dir   string
		Error string
	}
	if err := json.Unmarshal(stdout.Bytes(), &info); err != nil {
		return "", fmt.Errorf("decode go mod download output for %s: %w", moduleAtVersion, err)
	}
	if info.Error != "" || info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", moduleAtVersion, info.Error)
	}
	return info.Dir, nil
}
