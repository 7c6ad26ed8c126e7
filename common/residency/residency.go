// Package residency tells where a running Go process's resident memory of
// its own executable goes: which sections of the binary (code, read-only
// data, the runtime's function tables) and which Go modules and packages
// the resident pages belong to. It reads /proc/<pid>/maps, the page
// presence bits of /proc/<pid>/pagemap and the executable's ELF sections
// and symbol table, so it works on Linux only. A binary stripped of its
// symbol table (go test's) is shared out by its functions alone, from the
// runtime's own table.
//
// The file-backed part of an operator's RSS is mostly its own executable;
// this is how a benchmark says what that part is made of.
package residency

import (
	"bufio"
	"debug/elf"
	"debug/gosym"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
	"strconv"
	"strings"
)

// Share is the resident memory of one part of the executable.
type Share struct {
	// Name is a section (".text"), a module ("k8s.io/api") or a package.
	Name string
	// Bytes are resident.
	Bytes uint64
}

// Report is where the resident pages of a process's executable are.
type Report struct {
	// Resident is every resident byte of the executable's mappings.
	Resident uint64
	// Sections share Resident by ELF section; pages of a mapping outside
	// every section are under "(no section)".
	Sections []Share
	// Modules and Packages share the resident bytes of the symbols (code,
	// type descriptors, tables of data) by Go module and by package, the
	// largest first. They add up to less than Resident: the runtime's
	// function tables (.gopclntab) and the padding between symbols belong
	// to no symbol.
	Modules, Packages []Share
}

// Of reports on the process pid. It needs read access to its pagemap (the
// same user, or root).
func Of(pid int) (Report, error) {
	exe, err := os.Readlink(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return Report{}, fmt.Errorf("executable of process %d: %w", pid, err)
	}
	maps, err := mappingsOf(pid, exe)
	if err != nil {
		return Report{}, err
	}
	f, err := elf.Open(fmt.Sprintf("/proc/%d/exe", pid))
	if err != nil {
		return Report{}, fmt.Errorf("read %s: %w", exe, err)
	}
	defer f.Close()
	pageSize := uint64(os.Getpagesize())
	present, err := presentPages(pid, maps, pageSize)
	if err != nil {
		return Report{}, err
	}
	r := Report{}
	for _, m := range maps {
		m.locate(f)
	}
	r.Resident = uint64(len(present)) * pageSize
	r.Sections = sectionShares(f, maps, present, pageSize)
	syms, err := f.Symbols()
	if errors.Is(err, elf.ErrNoSymbols) {
		// A stripped binary (go test's, say) still names its functions
		// in the runtime's tables: its code can be shared out.
		syms, err = functionsOf(f)
	}
	if err != nil {
		return Report{}, fmt.Errorf("symbols of %s: %w", exe, err)
	}
	r.Modules, r.Packages = symbolShares(syms, maps, present, pageSize)
	return r, nil
}

// functionsOf returns the functions the runtime's table (.gopclntab) of f
// names, as symbols of its .text section.
func functionsOf(f *elf.File) ([]elf.Symbol, error) {
	text, tab := f.Section(".text"), f.Section(".gopclntab")
	if text == nil || tab == nil {
		return nil, errors.New("neither a symbol table nor the runtime's function table")
	}
	data, err := tab.Data()
	if err != nil {
		return nil, fmt.Errorf("read .gopclntab: %w", err)
	}
	table, err := gosym.NewTable(nil, gosym.NewLineTable(data, text.Addr))
	if err != nil {
		return nil, fmt.Errorf("decode .gopclntab: %w", err)
	}
	index := slices.Index(f.Sections, text)
	syms := make([]elf.Symbol, 0, len(table.Funcs))
	for _, fn := range table.Funcs {
		syms = append(syms, elf.Symbol{Name: fn.Name, Value: fn.Entry, Size: fn.End - fn.Entry, Section: elf.SectionIndex(index)})
	}
	return syms, nil
}

// mapping is one mapping of the executable: [start, end) of the process's
// addresses, from file offset offset; bias turns an ELF address into one
// of the process (0 for a binary that is not position independent).
type mapping struct {
	start, end, offset uint64
	bias               uint64
}

// mappingsOf reads the mappings of exe in /proc/<pid>/maps.
func mappingsOf(pid int, exe string) ([]*mapping, error) {
	file, err := os.Open(fmt.Sprintf("/proc/%d/maps", pid))
	if err != nil {
		return nil, fmt.Errorf("maps of process %d: %w", pid, err)
	}
	defer file.Close()
	var out []*mapping
	sc := bufio.NewScanner(file)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		if len(fields) < 6 || strings.Join(fields[5:], " ") != exe {
			continue
		}
		lo, hi, ok := strings.Cut(fields[0], "-")
		if !ok {
			return nil, fmt.Errorf("maps of process %d: malformed range %q", pid, fields[0])
		}
		var m mapping
		for _, v := range []struct {
			text string
			into *uint64
		}{{lo, &m.start}, {hi, &m.end}, {fields[2], &m.offset}} {
			if *v.into, err = strconv.ParseUint(v.text, 16, 64); err != nil {
				return nil, fmt.Errorf("maps of process %d: %w", pid, err)
			}
		}
		out = append(out, &m)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("maps of process %d: %w", pid, err)
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("process %d maps nothing of %s", pid, exe)
	}
	return out, nil
}

// locate sets m's bias from the loadable segment that holds its offset; a
// mapping of no loadable segment (the file mapped again by hand) keeps 0,
// and its addresses name no section.
func (m *mapping) locate(f *elf.File) {
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD && m.offset >= p.Off && m.offset < p.Off+p.Filesz {
			m.bias = m.start - (p.Vaddr + (m.offset - p.Off))
			return
		}
	}
}

// presentPages returns the addresses of the resident pages of maps, from
// bit 63 of each page's entry in /proc/<pid>/pagemap.
func presentPages(pid int, maps []*mapping, pageSize uint64) (map[uint64]bool, error) {
	file, err := os.Open(fmt.Sprintf("/proc/%d/pagemap", pid))
	if err != nil {
		return nil, fmt.Errorf("pagemap of process %d: %w", pid, err)
	}
	defer file.Close()
	present := map[uint64]bool{}
	for _, m := range maps {
		pages := (m.end - m.start) / pageSize
		buf := make([]byte, 8*pages)
		if _, err := file.ReadAt(buf, int64(m.start/pageSize*8)); err != nil && !errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("pagemap of process %d: %w", pid, err)
		}
		for i := range pages {
			if binary.LittleEndian.Uint64(buf[8*i:])&(1<<63) != 0 {
				present[m.start+i*pageSize] = true
			}
		}
	}
	return present, nil
}

// residentIn returns the resident bytes of the process addresses [lo, hi).
func residentIn(lo, hi uint64, present map[uint64]bool, pageSize uint64) uint64 {
	var n uint64
	for page := lo / pageSize * pageSize; page < hi; page += pageSize {
		if !present[page] {
			continue
		}
		n += min(hi, page+pageSize) - max(lo, page)
	}
	return n
}

// mappingOf returns the mapping that holds the ELF address addr.
func mappingOf(maps []*mapping, addr uint64) *mapping {
	for _, m := range maps {
		if a := addr + m.bias; a >= m.start && a < m.end {
			return m
		}
	}
	return nil
}

// sectionShares shares the resident pages by section.
func sectionShares(f *elf.File, maps []*mapping, present map[uint64]bool, pageSize uint64) []Share {
	bySection := map[string]uint64{}
	var covered uint64
	for _, s := range f.Sections {
		if s.Flags&elf.SHF_ALLOC == 0 || s.Size == 0 || s.Type == elf.SHT_NOBITS {
			continue
		}
		m := mappingOf(maps, s.Addr)
		if m == nil {
			continue
		}
		lo, hi := s.Addr+m.bias, min(s.Addr+m.bias+s.Size, m.end)
		n := residentIn(lo, hi, present, pageSize)
		bySection[s.Name] += n
		covered += n
	}
	if total := uint64(len(present)) * pageSize; total > covered {
		bySection["(no section)"] = total - covered
	}
	return sorted(bySection)
}

// symbolShares shares the resident bytes of the symbols by module and by
// package.
func symbolShares(syms []elf.Symbol, maps []*mapping, present map[uint64]bool, pageSize uint64) (modules, packages []Share) {
	byModule, byPackage := map[string]uint64{}, map[string]uint64{}
	for _, s := range syms {
		if s.Size == 0 || s.Section == elf.SHN_UNDEF || s.Section >= elf.SHN_LORESERVE {
			continue
		}
		m := mappingOf(maps, s.Value)
		if m == nil {
			continue
		}
		lo := s.Value + m.bias
		n := residentIn(lo, min(lo+s.Size, m.end), present, pageSize)
		if n == 0 {
			continue
		}
		pkg := PackageOf(s.Name)
		byPackage[pkg] += n
		byModule[ModuleOf(pkg)] += n
	}
	return sorted(byModule), sorted(byPackage)
}

// sorted returns m's shares, the largest first (then by name).
func sorted(m map[string]uint64) []Share {
	out := make([]Share, 0, len(m))
	for name, n := range m {
		out = append(out, Share{Name: name, Bytes: n})
	}
	slices.SortFunc(out, func(a, b Share) int {
		if a.Bytes != b.Bytes {
			if a.Bytes > b.Bytes {
				return -1
			}
			return 1
		}
		return strings.Compare(a.Name, b.Name)
	})
	return out
}

// PackageOf returns the import path of the package a Go symbol belongs to:
// k8s.io/api/core/v1 for "k8s.io/api/core/v1.(*Pod).Marshal" and for its
// type descriptor "type:*k8s.io/api/core/v1.Pod"; the symbol itself for
// one of no package (the linker's own, such as "runtime.text" has one).
func PackageOf(symbol string) string {
	name := symbol
	for _, prefix := range []string{"type:", "go:itab.", "go:info.", "go:cuinfo.", "gclocals·", "go:"} {
		name = strings.TrimPrefix(name, prefix)
	}
	name = strings.TrimLeft(name, "*")
	if i := strings.IndexAny(name, "[,"); i >= 0 {
		// A generic instantiation's type arguments, or an itab's
		// interface, name other packages.
		name = name[:i]
	}
	slash := strings.LastIndex(name, "/")
	dot := strings.Index(name[slash+1:], ".")
	if dot < 0 {
		return name
	}
	return name[:slash+1+dot]
}

// ModuleOf groups an import path by its module as it reads: the standard
// library ("std") for a path whose first element has no dot, three
// elements for github.com, gitlab.com and bitbucket.org, two for the
// others (k8s.io/api, google.golang.org/grpc).
func ModuleOf(pkg string) string {
	parts := strings.Split(pkg, "/")
	if !strings.Contains(parts[0], ".") {
		return "std"
	}
	n := 2
	switch parts[0] {
	case "github.com", "gitlab.com", "bitbucket.org":
		n = 3
	}
	if len(parts) < n {
		return pkg
	}
	return strings.Join(parts[:n], "/")
}

// Summary is the report in one line: the resident MiB and the top largest
// modules and sections, each in MiB.
func (r Report) Summary(top int) string {
	list := func(shares []Share) string {
		parts := make([]string, 0, top)
		for _, s := range shares[:min(top, len(shares))] {
			parts = append(parts, fmt.Sprintf("%s %.1f", s.Name, mib(s.Bytes)))
		}
		return strings.Join(parts, ", ")
	}
	return fmt.Sprintf("%.1f MiB of the executable resident; by module: %s; by section: %s",
		mib(r.Resident), list(r.Modules), list(r.Sections))
}

func mib(n uint64) float64 { return float64(n) / (1 << 20) }
