package pack

import (
	"errors"
	"fmt"
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
var ErrLoaderPanic = errors.New("compose-go panicked")

// UnmodelledError is a compose key custody does not model. Custody refuses
// it rather than dropping it, because compose itself silently drops keys it
// does not honour (secrets uid/gid/mode outside swarm, compose#9648) and a
// dropped security setting is a silent downgrade.
type UnmodelledError struct {
	// Path is the key's parent in dotted form ("services.web.deploy").
	Path string
	// Key is the refused key ("placement").
	Key string
}

func (e *UnmodelledError) Error() string {
	return fmt.Sprintf("pack: %s: key %q is not one custody models, so it is refused rather than ignored (a setting custody cannot enforce would silently weaken the pack); fix: remove it from the compose file (the pack reference lists every key custody models)",
		join(e.Path, e.Key), e.Key)
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

// ValueError is a modelled key with a value custody refuses.
type ValueError struct {
	Path string
	// Value is the offending value as written (may be "").
	Value string
	// Reason says why, naming the obligation; Fix says what to write.
	Reason string
	Fix    string
}

func (e *ValueError) Error() string {
	return fmt.Sprintf("pack: %s: value %q refused: %s; %s", e.Path, e.Value, e.Reason, e.Fix)
}

func (e *ValueError) Is(target error) bool { return target == ErrInvalid }

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}
