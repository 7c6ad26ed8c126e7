package operatorimage_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/trustplane/trustplane/e2e/operatorimage"
)

// instruction is one Dockerfile instruction with its continuation lines
// joined.
type instruction struct {
	keyword string
	args    string
}

// stage is one FROM stage of a Dockerfile.
type stage struct {
	name         string
	instructions []instruction
}

func parseDockerfile(content string) []stage {
	var stages []stage
	var logical string
	flush := func() {
		line := strings.TrimSpace(logical)
		logical = ""
		if line == "" {
			return
		}
		keyword, args, _ := strings.Cut(line, " ")
		in := instruction{keyword: strings.ToUpper(keyword), args: strings.TrimSpace(args)}
		if in.keyword == "FROM" {
			fields := strings.Fields(in.args)
			s := stage{}
			if len(fields) == 3 && strings.EqualFold(fields[1], "AS") {
				s.name = fields[2]
			}
			stages = append(stages, s)
			return
		}
		if len(stages) > 0 {
			stages[len(stages)-1].instructions = append(stages[len(stages)-1].instructions, in)
		}
	}
	for _, line := range strings.Split(content, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "#") {
			continue
		}
		if cont, ok := strings.CutSuffix(strings.TrimRight(line, " \t"), "\\"); ok {
			logical += cont + " "
			continue
		}
		logical += line
		flush()
	}
	flush()
	return stages
}

func (s stage) all(keyword string) []instruction {
	var out []instruction
	for _, in := range s.instructions {
		if in.keyword == keyword {
			out = append(out, in)
		}
	}
	return out
}

// checkDockerfile reports how the Dockerfile differs from the operator's Go
// image definition: the final stage copies the binary built by its build
// stage (cd <operator> && CGO_ENABLED=0 go build -trimpath -o <out> ./cmd)
// to the same path, runs as the same user with the same exec-form
// entrypoint, and adds no CMD.
func checkDockerfile(content string, o operatorimage.Operator) error {
	stages := parseDockerfile(content)
	if len(stages) < 2 {
		return fmt.Errorf("%d stages, want a build stage and a final stage", len(stages))
	}
	final := stages[len(stages)-1]
	copies := final.all("COPY")
	if len(copies) != 1 {
		return fmt.Errorf("final stage has %d COPY instructions, want 1 (the binary)", len(copies))
	}
	fields := strings.Fields(copies[0].args)
	if len(fields) != 3 || !strings.HasPrefix(fields[0], "--from=") {
		return fmt.Errorf("final COPY %q is not COPY --from=<stage> <binary> <path>", copies[0].args)
	}
	from, src, dst := strings.TrimPrefix(fields[0], "--from="), fields[1], fields[2]
	if dst != o.Binary() {
		return fmt.Errorf("binary copied to %s, want %s", dst, o.Binary())
	}
	users := final.all("USER")
	if len(users) != 1 || users[0].args != operatorimage.User {
		return fmt.Errorf("final USER instructions %v, want exactly USER %s", users, operatorimage.User)
	}
	if cmds := final.all("CMD"); len(cmds) != 0 {
		return fmt.Errorf("final stage has CMD %v; the image has none", cmds)
	}
	entrypoints := final.all("ENTRYPOINT")
	if len(entrypoints) != 1 {
		return fmt.Errorf("final stage has %d ENTRYPOINT instructions, want 1", len(entrypoints))
	}
	var entrypoint []string
	if err := json.Unmarshal([]byte(entrypoints[0].args), &entrypoint); err != nil {
		return fmt.Errorf("ENTRYPOINT %s is not in exec (JSON) form: %w", entrypoints[0].args, err)
	}
	if !slices.Equal(entrypoint, o.Entrypoint()) {
		return fmt.Errorf("ENTRYPOINT %q, want %q", entrypoint, o.Entrypoint())
	}
	build := slices.IndexFunc(stages, func(s stage) bool { return s.name == from })
	if build < 0 || build == len(stages)-1 {
		return fmt.Errorf("COPY --from=%s names no earlier stage", from)
	}
	for _, run := range stages[build].all("RUN") {
		if err := checkBuildCommand(run.args, o, src); err == nil {
			return nil
		} else if strings.Contains(run.args, src) {
			return err
		}
	}
	return fmt.Errorf("build stage %s has no RUN that builds %s", from, src)
}

// checkBuildCommand checks that run is `cd <operator> && CGO_ENABLED=0 go
// build -trimpath -o <out> ./cmd` (other flags allowed).
func checkBuildCommand(run string, o operatorimage.Operator, out string) error {
	steps := strings.Split(run, "&&")
	if len(steps) != 2 || strings.Join(strings.Fields(steps[0]), " ") != "cd "+o.Name {
		return fmt.Errorf("RUN %q does not build in %s (want cd %s && ... go build)", run, o.Name, o.Name)
	}
	words := strings.Fields(steps[1])
	gobuild := slices.Index(words, "go")
	if gobuild < 0 || gobuild+1 >= len(words) || words[gobuild+1] != "build" {
		return fmt.Errorf("RUN %q does not run go build", run)
	}
	if !slices.Contains(words[:gobuild], "CGO_ENABLED=0") {
		return fmt.Errorf("RUN %q does not set CGO_ENABLED=0 (the binary must be static)", run)
	}
	flags := words[gobuild+2:]
	if !slices.Contains(flags, "-trimpath") {
		return fmt.Errorf("RUN %q builds without -trimpath", run)
	}
	if o := slices.Index(flags, "-o"); o < 0 || o+1 >= len(flags) || flags[o+1] != out {
		return fmt.Errorf("RUN %q does not write %s", run, out)
	}
	if len(flags) == 0 || flags[len(flags)-1] != operatorimage.Package {
		return fmt.Errorf("RUN %q does not build %s", run, operatorimage.Package)
	}
	return nil
}

// TestDockerfilesMatchTheImageDefinition fails when an operator's Dockerfile
// drifts from the image assembled in Go (binary, user, entrypoint, build).
func TestDockerfilesMatchTheImageDefinition(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.work")); err != nil {
		t.Fatalf("repository root %s: %v", root, err)
	}
	for _, o := range operatorimage.Operators() {
		t.Run(o.Name, func(t *testing.T) {
			content, err := os.ReadFile(filepath.Join(root, o.Name, "Dockerfile"))
			if err != nil {
				t.Fatal(err)
			}
			if err := checkDockerfile(string(content), o); err != nil {
				t.Errorf("%s/Dockerfile differs from the Go image definition: %v", o.Name, err)
			}
		})
	}
}

// TestDockerfileCheckCatchesDrift shows that the check above fails for each
// kind of drift it is meant to catch.
func TestDockerfileCheckCatchesDrift(t *testing.T) {
	o, err := operatorimage.Lookup("spiffe-operator")
	if err != nil {
		t.Fatal(err)
	}
	good := `# comment
FROM golang:1.26 AS build
WORKDIR /src
COPY . .
RUN cd spiffe-operator && \
    CGO_ENABLED=0 go build -trimpath -o /out/spiffe-operator ./cmd

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/spiffe-operator /spiffe-operator
USER 65532:65532
ENTRYPOINT ["/spiffe-operator"]
`
	if err := checkDockerfile(good, o); err != nil {
		t.Fatalf("a matching Dockerfile is rejected: %v", err)
	}
	cases := map[string]struct{ from, to, want string }{
		"binary path":       {"/out/spiffe-operator /spiffe-operator", "/out/spiffe-operator /manager", "copied to /manager"},
		"user":              {"USER 65532:65532", "USER 0:0", "USER"},
		"no user":           {"USER 65532:65532\n", "", "USER"},
		"entrypoint":        {`["/spiffe-operator"]`, `["/manager"]`, "ENTRYPOINT"},
		"shell entrypoint":  {`["/spiffe-operator"]`, `/spiffe-operator`, "exec (JSON) form"},
		"cmd added":         {"USER 65532", "CMD [\"--x\"]\nUSER 65532", "CMD"},
		"cgo":               {"CGO_ENABLED=0 go", "go", "CGO_ENABLED=0"},
		"trimpath":          {"-trimpath ", "", "-trimpath"},
		"other package":     {"spiffe-operator ./cmd", "spiffe-operator ./cmd/other", "does not build ./cmd"},
		"other module":      {"cd spiffe-operator", "cd bundle-operator", "does not build in spiffe-operator"},
		"other output":      {"--from=build /out/spiffe-operator", "--from=build /out/other", "no RUN that builds /out/other"},
		"other stage":       {"--from=build", "--from=tools", "names no earlier stage"},
		"single stage":      {"FROM gcr.io/distroless/static:nonroot\n", "", "stages"},
		"two files copied":  {"USER 65532", "COPY --from=build /etc/passwd /etc/passwd\nUSER 65532", "COPY instructions"},
		"second entrypoint": {"ENTRYPOINT", "ENTRYPOINT [\"/sh\"]\nENTRYPOINT", "ENTRYPOINT instructions"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			drifted := strings.Replace(good, c.from, c.to, 1)
			if drifted == good {
				t.Fatalf("case does not change the Dockerfile (%q not found)", c.from)
			}
			err := checkDockerfile(drifted, o)
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want one containing %q", err, c.want)
			}
		})
	}
}
