package pack

import (
	"errors"
	"fmt"
	"strings"
)

// ErrInvalid is wrapped by every error Load returns, so a caller can tell
// "this pack is refused" from a cancelled context with errors.Is. The typed
// errors below say why, for callers that branch with errors.As.
var ErrInvalid = errors.New("pack refused")

// ErrTooLarge is wrapped when the file, or a count in it, is over a limit.
var ErrTooLarge = errors.New("pack over a size limit")

// ErrLoaderPanic is wrapped when compose-go panicked on the input. Load
// refuses the pack instead of crashing; the fuzz target treats it as a bug
// to fix with an earlier, explicit refusal.
var ErrLoaderPanic = errors.New("the compose loader failed on this input")

// UnmodelledError is a compose key custody does not model. Custody refuses
// it rather than dropping it, because compose itself silently drops keys it
// does not honour (secrets uid/gid/mode outside swarm, compose#9648) and a
// dropped security setting is a silent downgrade.
type UnmodelledError struct {
	// Path is the key's parent in dotted form ("services.web.deploy").
	Path string
	// Key is the refused key ("placement").
	Key string
	// Reason and Fix are the key table's for this key (see KeyTable);
	// empty for a key the table does not name.
	Reason, Fix string
}

func (e *UnmodelledError) Error() string {
	r := e.refusal()
	return fmt.Sprintf("pack: %s: key %q refused: %s; fix: %s", r.Path, e.Key, r.Reason, r.Fix)
}

func (e *UnmodelledError) refusal() Refusal {
	r := Refusal{Path: join(e.Path, e.Key), Code: "unmodelled", Reason: e.Reason, Fix: e.Fix}
	if r.Reason == "" {
		r.Code = "unknown-key"
		r.Reason = "not a key of the compose specification custody knows, so it is refused rather than ignored (a setting custody cannot enforce would silently weaken the pack)"
	}
	if r.Fix == "" {
		r.Fix = "remove it from the compose file (the compose key table in the pack reference lists every key and its verdict)"
	}
	return r
}

func (e *UnmodelledError) Is(target error) bool { return target == ErrInvalid }

// InterpolationError is a ${VAR} or $VAR reference in the file. Packs are
// never interpolated from the caller's environment (P5), so a reference is
// refused rather than replaced by an empty string.
type InterpolationError struct {
	Path string
	// Variable is the name referenced; "" for a malformed "$" sequence.
	Variable string
}

func (e *InterpolationError) Error() string {
	if e.Variable == "" {
		return fmt.Sprintf("pack: %s: malformed $ sequence; packs are not interpolated (P5): write a literal $ as $$", e.Path)
	}
	return fmt.Sprintf("pack: %s: references variable %q; packs are never interpolated from the environment (P5): write the literal value, or $$ for a literal $", e.Path, e.Variable)
}

func (e *InterpolationError) Is(target error) bool { return target == ErrInvalid }

func (e *InterpolationError) refusal() Refusal {
	r := Refusal{Path: e.Path, Value: e.Variable, Code: "interpolation",
		Reason: "packs are never interpolated from the environment (P5)",
		Fix:    "write the literal value, or $$ for a literal $"}
	if e.Variable == "" {
		r.Reason = "a malformed $ sequence; packs are not interpolated (P5)"
		r.Fix = "write a literal $ as $$"
	} else {
		r.Reason = fmt.Sprintf("references variable %q; ", e.Variable) + r.Reason
	}
	return r
}

// ValueError is a modelled key with a value custody refuses.
type ValueError struct {
	Path string
	// Value is the offending value as written (may be "").
	Value string
	// Reason says why, naming the obligation; Fix says what to write.
	Reason string
	Fix    string
	// Code names the refusal for callers that branch on it; "" is
	// "value-refused".
	Code string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("pack: %s: value %q refused: %s; %s", e.Path, e.Value, e.Reason, e.Fix)
}

func (e *ValueError) Is(target error) bool { return target == ErrInvalid }

func (e *ValueError) refusal() Refusal {
	code := e.Code
	if code == "" {
		code = "value-refused"
	}
	return Refusal{Path: e.Path, Value: e.Value, Code: code, Reason: e.Reason, Fix: e.Fix}
}

// LimitError is a file, or a part of it, over one of Load's size limits.
// It wraps ErrTooLarge and ErrInvalid.
type LimitError struct {
	// Path is the key over the limit; "" for the whole file.
	Path        string
	Reason, Fix string
}

func (e *LimitError) Error() string {
	where := e.Path
	if where == "" {
		where = "the file"
	}
	return fmt.Sprintf("pack: %s: %s; %s", where, e.Reason, e.Fix)
}

func (e *LimitError) Is(target error) bool { return target == ErrInvalid || target == ErrTooLarge }

func (e *LimitError) refusal() Refusal {
	return Refusal{Path: e.Path, Code: "too-large", Reason: e.Reason, Fix: e.Fix}
}

// Refusal is one refused requirement of a pack file, as an operator reads
// it: where (the key path as written, "" for the whole file), the value,
// a stable code, why, and what to write instead.
type Refusal struct {
	Path, Value, Code, Reason, Fix string
}

// RefusedError is every refused requirement of one pack file, in file
// order. Load returns it for any pack it refuses; the typed errors behind
// it stay reachable with errors.As, and it wraps ErrInvalid.
type RefusedError struct {
	Errs []error
}

func (e *RefusedError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "pack: %d requirement(s) refused:", len(e.Errs))
	for _, r := range e.Refusals() {
		where := r.Path
		if where == "" {
			where = "(file)"
		}
		fmt.Fprintf(&b, "\n  %s: %s (%s)", where, r.Reason, r.Code)
		if r.Value != "" {
			fmt.Fprintf(&b, " [value %q]", r.Value)
		}
		fmt.Fprintf(&b, "; fix: %s", r.Fix)
	}
	return b.String()
}

func (e *RefusedError) Unwrap() []error { return e.Errs }

// Refusals lists the refused requirements in file order.
func (e *RefusedError) Refusals() []Refusal {
	out := make([]Refusal, 0, len(e.Errs))
	for _, err := range e.Errs {
		out = append(out, refusalOf(err))
	}
	return out
}

// refusalOf gives any refusal of Load its requirement form; an error of
// no known type (a YAML syntax error, a compose-go schema refusal) is a
// refusal of the whole file.
func refusalOf(err error) Refusal {
	var r interface{ refusal() Refusal }
	if errors.As(err, &r) {
		return r.refusal()
	}
	return Refusal{Path: "", Code: "pack-invalid", Reason: strings.TrimPrefix(err.Error(), "pack: "),
		Fix: "write a compose file that docker compose config accepts"}
}

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
