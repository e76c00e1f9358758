package tether

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	pb "github.com/tether-dev/tether/clients/go/tetherv1"
)

const chunkSize = 256 << 10

// PutTar unpacks a tar stream into the workspace under dir ("" for the root).
func (c *Client) PutTar(ctx context.Context, runID, dir string, archive io.Reader) (*pb.PutFilesResponse, error) {
	stream, err := c.rpc.PutFiles(c.Authorize(ctx))
	if err != nil {
		return nil, wrap(err)
	}
	send := func(m *pb.PutFilesRequest) error {
		if err := stream.Send(m); err != nil {
			// The server ended the stream; its status is what CloseAndRecv reports.
			if errors.Is(err, io.EOF) {
				return nil
			}
			return err
		}
		return nil
	}
	if err := send(&pb.PutFilesRequest{Msg: &pb.PutFilesRequest_Header{Header: &pb.PutFilesHeader{RunId: runID, Path: dir}}}); err != nil {
		return nil, wrap(err)
	}
	buf := make([]byte, chunkSize)
	for {
		n, rerr := io.ReadFull(archive, buf)
		if n > 0 {
			chunk := append([]byte(nil), buf[:n]...)
			if err := send(&pb.PutFilesRequest{Msg: &pb.PutFilesRequest_Chunk{Chunk: chunk}}); err != nil {
				return nil, wrap(err)
			}
		}
		if rerr == io.EOF || rerr == io.ErrUnexpectedEOF {
			break
		}
		if rerr != nil {
			return nil, rerr
		}
	}
	res, err := stream.CloseAndRecv()
	return res, wrap(err)
}

// PutFiles writes a map of workspace-relative path to content under dir, as regular files.
func (c *Client) PutFiles(ctx context.Context, runID, dir string, files map[string][]byte) (*pb.PutFilesResponse, error) {
	archive, err := TarOfMap(files)
	if err != nil {
		return nil, err
	}
	return c.PutTar(ctx, runID, dir, bytes.NewReader(archive))
}

// PutDir writes a local folder's regular files and directories under dir.
func (c *Client) PutDir(ctx context.Context, runID, dir, local string) (*pb.PutFilesResponse, error) {
	archive, err := TarOfDir(local)
	if err != nil {
		return nil, err
	}
	return c.PutTar(ctx, runID, dir, bytes.NewReader(archive))
}

// GetTar returns the workspace (or one path in it) as a tar archive. A folder's entries are
// named by their workspace path; a single file by its own name.
func (c *Client) GetTar(ctx context.Context, runID, p string) ([]byte, error) {
	stream, err := c.rpc.GetFiles(c.Authorize(ctx), &pb.GetFilesRequest{RunId: runID, Path: p})
	if err != nil {
		return nil, wrap(err)
	}
	var out bytes.Buffer
	for {
		m, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			return out.Bytes(), nil
		}
		if err != nil {
			return nil, wrap(err)
		}
		out.Write(m.GetChunk())
	}
}

// GetFiles returns the regular files of the workspace (or under p) by path.
func (c *Client) GetFiles(ctx context.Context, runID, p string) (map[string][]byte, error) {
	archive, err := c.GetTar(ctx, runID, p)
	if err != nil {
		return nil, err
	}
	return FilesOfTar(archive)
}

// GetFilesInto writes the workspace (or p in it) into a local folder and returns the files
// written. Entries that would land outside the folder are refused.
func (c *Client) GetFilesInto(ctx context.Context, runID, p, local string) ([]string, error) {
	archive, err := c.GetTar(ctx, runID, p)
	if err != nil {
		return nil, err
	}
	return ExtractTar(archive, local)
}

// EntryName is a tar entry's name without a leading "./" or a trailing "/".
func EntryName(name string) string {
	for strings.HasPrefix(name, "./") {
		name = name[2:]
	}
	return strings.TrimRight(name, "/")
}

// TarOfMap builds a tar of regular files (mode 0644) from a map of path to content.
func TarOfMap(files map[string][]byte) ([]byte, error) {
	names := make([]string, 0, len(files))
	for n := range files {
		names = append(names, n)
	}
	sort.Strings(names)
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, n := range names {
		if err := tw.WriteHeader(&tar.Header{Name: n, Mode: 0o644, Size: int64(len(files[n])), Typeflag: tar.TypeReg, Format: tar.FormatPAX}); err != nil {
			return nil, err
		}
		if _, err := tw.Write(files[n]); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// TarOfDir builds a tar of a local folder's regular files and directories (symlinks skipped).
func TarOfDir(local string) ([]byte, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	err := filepath.WalkDir(local, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if p == local || !(d.IsDir() || d.Type().IsRegular()) {
			return nil
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(local, p)
		if err != nil {
			return err
		}
		hdr, err := tar.FileInfoHeader(info, "")
		if err != nil {
			return err
		}
		hdr.Name = filepath.ToSlash(rel)
		hdr.Uname, hdr.Gname, hdr.Uid, hdr.Gid = "", "", 0, 0
		if err := tw.WriteHeader(hdr); err != nil {
			return err
		}
		if d.IsDir() {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		_, err = io.Copy(tw, f)
		return err
	})
	if err != nil {
		return nil, err
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// FilesOfTar returns a tar's regular files by entry name.
func FilesOfTar(archive []byte) (map[string][]byte, error) {
	out := map[string][]byte{}
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		if hdr.Typeflag != tar.TypeReg {
			continue
		}
		data, err := io.ReadAll(tr)
		if err != nil {
			return nil, err
		}
		out[EntryName(hdr.Name)] = data
	}
}

// ExtractTar writes a tar's regular files and directories under local.
func ExtractTar(archive []byte, local string) ([]string, error) {
	var written []string
	tr := tar.NewReader(bytes.NewReader(archive))
	for {
		hdr, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return written, nil
		}
		if err != nil {
			return nil, err
		}
		name := EntryName(hdr.Name)
		clean := path.Clean(name)
		if name == "" || path.IsAbs(name) || clean == ".." || strings.HasPrefix(clean, "../") {
			return nil, fmt.Errorf("tether: tar entry escapes the target folder: %q", hdr.Name)
		}
		target := filepath.Join(local, filepath.FromSlash(clean))
		switch hdr.Typeflag {
		case tar.TypeDir:
			if err := os.MkdirAll(target, 0o755); err != nil {
				return nil, err
			}
		case tar.TypeReg:
			if err := os.MkdirAll(filepath.Dir(target), 0o755); err != nil {
				return nil, err
			}
			data, err := io.ReadAll(tr)
			if err != nil {
				return nil, err
			}
			if err := os.WriteFile(target, data, 0o644); err != nil {
				return nil, err
			}
			written = append(written, clean)
		}
	}
}
