import { promises as fs } from 'node:fs';
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
      const abs = await run.workspace.resolve(args.path);
      const stat = await fs.stat(abs);
      if (stat.isDirectory()) {
        const entries = await fs.readdir(abs, { withFileTypes: true });
        const names = entries.map((e) => (e.isDirectory() ? `${e.name}/` : e.name)).sort();
        return {
          content: [{ type: 'text', text: `${args.path} is a directory:\n${names.join('\n')}` }],
          structured: { directory: true, entries: names },
        };
      }
      // FIFOs and devices would block or never end: only regular files are read.
      if (!stat.isFile()) throw new ToolError(`${args.path} is not a regular file`);
      const buf = await fs.readFile(abs);
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
