package mcpserver

import (
	"archive/tar"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/custody-dev/custody/api"
)

// ReadInput is what custody_read_output takes.
type ReadInput struct {
	RunRef
	Path     string `json:"path" jsonschema:"the file's path as custody_list_outputs lists it"`
	Offset   int64  `json:"offset,omitempty" jsonschema:"byte offset to start at (default 0)"`
	MaxBytes int    `json:"max_bytes,omitempty" jsonschema:"how many bytes to return at most (default and cap: the server's, 256 KiB unless its operator set another)"`
}

// ReadAnswer is part of one output file.
type ReadAnswer struct {
	RunID    string   `json:"run_id,omitempty"`
	Path     string   `json:"path,omitempty"`
	Size     int64    `json:"size" jsonschema:"the whole file's size"`
	SHA256   string   `json:"sha256,omitempty" jsonschema:"the whole file's sha256, as the run's receipt binds it"`
	Offset   int64    `json:"offset"`
	Encoding string   `json:"encoding,omitempty" jsonschema:"utf-8 when content is the bytes as text, base64 otherwise"`
	Content  string   `json:"content"`
	Bytes    int      `json:"bytes" jsonschema:"how many of the file's bytes content holds"`
	More     bool     `json:"more" jsonschema:"true when the file goes on after these bytes: read again from offset + bytes"`
	Refusal  *Refusal `json:"refusal,omitempty"`
}

// readOutput is custody_read_output: it streams the run's kept outputs
// from custodyd and stops reading once it has the part asked for.
func (s *Server) readOutput(ctx context.Context, _ *mcp.CallToolRequest, in ReadInput) (*mcp.CallToolResult, ReadAnswer, error) {
	a, err := s.read(ctx, in)
	if err != nil {
		r := refusalOf(err)
		return failed(r), ReadAnswer{RunID: in.RunID, Path: in.Path, Refusal: r}, nil
	}
	return nil, a, nil
}

func (s *Server) read(ctx context.Context, in ReadInput) (ReadAnswer, error) {
	want := cleanOutputPath(in.Path)
	if in.Offset < 0 {
		return ReadAnswer{}, errors.New("offset is negative; fix: give an offset of 0 or more")
	}
	res, err := s.c.GetRun(ctx, in.RunID)
	if err != nil {
		return ReadAnswer{}, err
	}
	var file *api.OutputFile
	if res.Output != nil {
		for i := range res.Output.Files {
			if cleanOutputPath(res.Output.Files[i].Path) == want {
				file = &res.Output.Files[i]
			}
		}
	}
	if file == nil {
		return ReadAnswer{}, &api.Error{Code: api.CodeNotFound, Message: fmt.Sprintf("run %s kept no file %q; fix: use a path custody_list_outputs lists", in.RunID, in.Path)}
	}
	limit := s.opts.ReadBytes
	if in.MaxBytes > 0 && in.MaxBytes < limit {
		limit = in.MaxBytes
	}
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	pr, pw := io.Pipe()
	done := make(chan error, 1)
	go func() {
		err := s.c.GetOutputs(ctx, in.RunID, pw)
		pw.CloseWithError(err)
		done <- err
	}()
	defer func() {
		stop()
		pr.Close()
		<-done
	}()
	tr := tar.NewReader(pr)
	for {
		h, err := tr.Next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = fmt.Errorf("run %s: the runner's outputs hold no file %q, which its record lists", in.RunID, in.Path)
			}
			return ReadAnswer{}, err
		}
		if h.Typeflag != tar.TypeReg || cleanOutputPath(h.Name) != want {
			continue
		}
		if _, err := io.CopyN(io.Discard, tr, in.Offset); err != nil && !errors.Is(err, io.EOF) {
			return ReadAnswer{}, err
		}
		buf := make([]byte, limit)
		n, err := io.ReadFull(tr, buf)
		if err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
			return ReadAnswer{}, err
		}
		buf = textCut(buf[:n], in.Offset+int64(n) < h.Size)
		a := ReadAnswer{RunID: in.RunID, Path: file.Path, Size: h.Size, SHA256: file.SHA256, Offset: in.Offset, Bytes: len(buf), More: in.Offset+int64(len(buf)) < h.Size}
		if utf8.Valid(buf) {
			a.Encoding, a.Content = "utf-8", string(buf)
		} else {
			a.Encoding, a.Content = "base64", base64.StdEncoding.EncodeToString(buf)
		}
		return a, nil
	}
}

// cleanOutputPath is an output path as both the listing and the archive
// spell it: relative, slash-separated, clean.
func cleanOutputPath(p string) string {
	return strings.TrimPrefix(path.Clean("/"+p), "/")
}

// textCut is buf without a multi-byte character the bound cut in two at
// its end, when the file goes on (more) and the rest is text: the next
// read starts at that character, and the part reads as text rather than
// base64.
func textCut(buf []byte, more bool) []byte {
	if !more || utf8.Valid(buf) {
		return buf
	}
	for cut := 1; cut < utf8.UTFMax && cut < len(buf); cut++ {
		if head := buf[:len(buf)-cut]; utf8.Valid(head) && !utf8.FullRune(buf[len(buf)-cut:]) {
			return head
		}
	}
	return buf
}
