package oci

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"fmt"

	seccomp "github.com/elastic/go-seccomp-bpf"
	"github.com/elastic/go-seccomp-bpf/arch"
	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/net/bpf"
	"golang.org/x/sys/unix"
)

// maxFilterInstructions is the kernel's limit on a classic BPF program
// (BPF_MAXINSNS); the gate refuses anything longer too.
const maxFilterInstructions = 4096

// Filter is the reviewed seccomp filter compiled once into the classic BPF
// program seccomp(SECCOMP_SET_MODE_FILTER) installs: struct sock_filter
// entries in host byte order. The gate installs it as the container's
// last step before it reports ready, so runc does not compile the profile
// again for every container.
type Filter struct {
	Program []byte
	SHA256  string // hex digest of Program, recorded in receipts
}

// CompileFilter compiles seccompRules for the native system call ABI. It
// is the same filter as seccompProfile gives runc: every rule, the default
// action (EPERM), and anything from another ABI (i386, or x32 on amd64)
// refused.
func CompileFilter() (*Filter, error) {
	insns, err := filterInstructions()
	if err != nil {
		return nil, err
	}
	raw, err := bpf.Assemble(insns)
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: assemble: %w", err)
	}
	if len(raw) > maxFilterInstructions {
		return nil, fmt.Errorf("seccomp filter: %d instructions, more than the kernel's %d", len(raw), maxFilterInstructions)
	}
	prog := make([]byte, 0, 8*len(raw))
	for _, r := range raw {
		prog = binary.NativeEndian.AppendUint16(prog, r.Op)
		prog = append(prog, r.Jt, r.Jf)
		prog = binary.NativeEndian.AppendUint32(prog, r.K)
	}
	sum := sha256.Sum256(prog)
	return &Filter{Program: prog, SHA256: hex.EncodeToString(sum[:])}, nil
}

// filterInstructions turns seccompRules into a policy for the native ABI.
// Rules are grouped by action in the order they first appear; a syscall
// name unknown to the native table belongs to another ABI and is left out,
// as libseccomp leaves it out for runc.
func filterInstructions() ([]bpf.Instruction, error) {
	native, err := arch.GetInfo("")
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	pol := seccomp.Policy{DefaultAction: seccomp.ActionErrno} // EPERM
	groups := map[seccomp.Action]int{}
	for _, r := range seccompRules() {
		action, err := filterAction(r)
		if err != nil {
			return nil, err
		}
		i, ok := groups[action]
		if !ok {
			i = len(pol.Syscalls)
			groups[action] = i
			pol.Syscalls = append(pol.Syscalls, seccomp.SyscallGroup{Action: action})
		}
		g := &pol.Syscalls[i]
		var conds seccomp.ArgumentConditions
		for _, a := range r.Args {
			c, err := filterCondition(a)
			if err != nil {
				return nil, fmt.Errorf("seccomp filter: %v: %w", r.Names, err)
			}
			conds = append(conds, c)
		}
		for _, name := range r.Names {
			if _, ok := native.SyscallNames[name]; !ok {
				continue
			}
			if len(conds) == 0 {
				g.Names = append(g.Names, name)
			} else {
				g.NamesWithCondtions = append(g.NamesWithCondtions, seccomp.NameWithConditions{Name: name, Conditions: conds})
			}
		}
	}
	insns, err := pol.Assemble()
	if err != nil {
		return nil, fmt.Errorf("seccomp filter: %w", err)
	}
	return insns, nil
}

func filterAction(r specs.LinuxSyscall) (seccomp.Action, error) {
	switch r.Action {
	case specs.ActAllow:
		return seccomp.ActionAllow, nil
	case specs.ActErrno:
		errno := uint(unix.EPERM)
		if r.ErrnoRet != nil {
			errno = *r.ErrnoRet
		}
		if errno == 0 || errno > 0xffff {
			return 0, fmt.Errorf("seccomp filter: %v: errno %d out of range", r.Names, errno)
		}
		return seccomp.Action(unix.SECCOMP_RET_ERRNO | uint32(errno)), nil
	}
	return 0, fmt.Errorf("seccomp filter: %v: action %s has no compiled form", r.Names, r.Action)
}

func filterCondition(a specs.LinuxSeccompArg) (seccomp.Condition, error) {
	switch {
	case a.Index > 5:
		return seccomp.Condition{}, fmt.Errorf("argument %d: a syscall has six", a.Index)
	case a.Op == specs.OpEqualTo:
		return seccomp.Condition{Argument: uint32(a.Index), Operation: seccomp.Equal, Value: a.Value}, nil
	case a.Op == specs.OpMaskedEqual && a.ValueTwo == 0:
		// (arg & mask) == 0: none of the mask's bits set.
		return seccomp.Condition{Argument: uint32(a.Index), Operation: seccomp.BitsNotSet, Value: a.Value}, nil
	}
	return seccomp.Condition{}, fmt.Errorf("comparison %s (value %#x, %#x) has no compiled form", a.Op, a.Value, a.ValueTwo)
}
