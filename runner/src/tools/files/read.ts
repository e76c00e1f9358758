import {
  closeSync,
  constants,
  fstatSync,
  openSync,
  promises as fs,
  readSync,
  realpathSync,
  statSync,
  type Stats,
} from 'node:fs';
import { PORTABLE_STATE_DIR } from '../../../../protocol/src/suspend';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import { MAX_READ_BYTES, MAX_READ_LINES, readSchema, type ReadArgs } from './schemas';

export function readTool(run: RunContext): ToolDefinition<ReadArgs> {
  return {
    name: 'read',
    description: `Read a text file of the workspace, with 1-based line numbers. At most ${MAX_READ_LINES} lines or ${MAX_READ_BYTES / 1024} KiB per call; use start_line/end_line for more.`,
    tier: 'read',
    inputSchema: readSchema,
    parallelSafe: true,
    async run(args) {
      const opened = run.workspace.openConfined(args.path);
      const abs = opened ? opened.real : await run.workspace.resolve(args.path);
      const small = opened ? readOpened(opened.fd) : readSmallFile(abs);
      const stat = small.stat;
      if (stat.isDirectory()) {
        const entries = await fs.readdir(abs, { withFileTypes: true });
        // The reserved state directory at the root is not shown.
        const names = entries
          .filter((e) => !(e.name === PORTABLE_STATE_DIR && abs === realpathSync.native(run.workspace.root)))
          .map((e) => (e.isDirectory() ? `${e.name}/` : e.name))
          .sort();
        return {
          content: [{ type: 'text', text: `${args.path} is a directory:\n${names.join('\n')}` }],
          structured: { directory: true, entries: names },
        };
      }
      // FIFOs and devices would block or never end: only regular files are read.
      if (!stat.isFile()) throw new ToolError(`${args.path} is not a regular file`);
      const buf = small.content ?? (await fs.readFile(abs));
      if (buf.subarray(0, 8192).includes(0))
        throw new ToolError(`${args.path} is a binary file (${buf.length} bytes); read only returns text`);
      const all = buf.toString('utf8').split('\n');
      if (all.length > 1 && all[all.length - 1] === '') all.pop();
      const start = args.start_line ?? 1;
      if (start > Math.max(all.length, 1))
        throw new ToolError(`start_line ${start} is past the end of ${args.path} (${all.length} lines)`);
      if (args.end_line !== undefined && args.end_line < start)
        throw new ToolError(`end_line ${args.end_line} is before start_line ${start}`);
      let end = Math.min(args.end_line ?? all.length, all.length, start + MAX_READ_LINES - 1);
      const out: string[] = [];
      let bytes = 0;
      for (let n = start; n <= end; n++) {
        const line = all[n - 1] ?? '';
        bytes += Buffer.byteLength(line) + 1;
        if (bytes > MAX_READ_BYTES && n > start) {
          end = n - 1;
          break;
        }
        out.push(line);
      }
      const numbered = out.map((l, i) => `${String(start + i).padStart(6)}\t${l}`).join('\n');
      const more =
        end < all.length
          ? `\n… showing lines ${start}-${end} of ${all.length}; continue with start_line ${end + 1}`
          : '';
      return {
        content: [{ type: 'text', text: numbered + more }],
        structured: {
          path: run.workspace.relative(abs),
          startLine: start,
          endLine: end,
          totalLines: all.length,
          content: out.join('\n') + (out.length ? '\n' : ''),
        },
      };
    },
  };
}

/** Files up to this size are read on the runner's thread, larger ones through the thread pool. */
const SYNC_READ_BYTES = 1024 * 1024;

/**
 * Opens `abs` once and looks at what it is; a small regular file is read there and then. Four
 * system calls and no thread-pool round trips, where `stat` then `readFile` made five round
 * trips. The open does not block: a FIFO opens at once, and is refused by its kind.
 */
function readSmallFile(abs: string): { stat: Stats; content?: Buffer } {
  let fd: number;
  try {
    fd = openSync(abs, constants.O_RDONLY | constants.O_NONBLOCK | constants.O_NOCTTY);
  } catch (err) {
    // A Unix socket cannot be opened at all; its kind is reported like any other non-file.
    if ((err as NodeJS.ErrnoException).code === 'ENXIO') return { stat: statSync(abs) };
    throw err;
  }
  return readOpened(fd);
}

/** What an open descriptor is, and a small regular file's content; closes it. */
function readOpened(fd: number): { stat: Stats; content?: Buffer } {
  try {
    const stat = fstatSync(fd);
    if (!stat.isFile() || stat.size > SYNC_READ_BYTES) return { stat };
    const content = Buffer.allocUnsafe(stat.size);
    let got = 0;
    while (got < stat.size) {
      const n = readSync(fd, content, got, stat.size - got, got);
      if (n === 0) break;
      got += n;
    }
    return { stat, content: content.subarray(0, got) };
  } finally {
    closeSync(fd);
  }
}
