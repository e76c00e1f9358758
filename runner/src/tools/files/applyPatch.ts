import { readRegularText } from '../../workspace';
import type { RunContext } from '../../run';
import { ToolError, type ToolDefinition } from '../../tool';
import { commitChanges, type FileChange } from '../../fileTransaction';
import { applyPatchSchema, type ApplyPatchArgs } from './schemas';
import { applyHunks, parsePatch, PatchError } from './patch';

async function readOrNull(p: string): Promise<string | null> {
  try {
    return await readRegularText(p);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

export function applyPatchTool(run: RunContext): ToolDefinition<ApplyPatchArgs> {
  return {
    name: 'apply_patch',
    description:
      'Apply a "*** Begin Patch" envelope (Add/Update/Delete/Move files). Every file changes or none does. Newly introduced diagnostics are folded into the result.',
    tier: 'write',
    inputSchema: applyPatchSchema,
    parallelSafe: false,
    async run(args, ctx) {
      let ops;
      try {
        ops = parsePatch(args.patch);
      } catch (err) {
        if (err instanceof PatchError) throw new ToolError(`patch not applied: ${err.message}`);
        throw err;
      }
      // Later operations see earlier ones, so a patch may add a file and then update it.
      const state = new Map<string, { expected: string | null; next: string | null }>();
      const current = async (abs: string) => {
        const s = state.get(abs);
        if (s) return s.next;
        const disk = await readOrNull(abs);
        state.set(abs, { expected: disk, next: disk });
        return disk;
      };
      const set = (abs: string, next: string | null) => {
        state.get(abs)!.next = next;
      };
      const summary: string[] = [];
      try {
        for (const op of ops) {
          const abs = await run.workspace.resolve(op.path);
          const rel = run.workspace.relative(abs);
          const now = await current(abs);
          if (op.kind === 'add') {
            if (now !== null) throw new PatchError(`cannot add ${rel}: it already exists`);
            set(abs, op.content);
            summary.push(`A ${rel}`);
          } else if (op.kind === 'delete') {
            if (now === null) throw new PatchError(`cannot delete ${rel}: no such file`);
            set(abs, null);
            summary.push(`D ${rel}`);
          } else {
            if (now === null) throw new PatchError(`cannot update ${rel}: no such file`);
            const next = applyHunks(now, op.hunks, rel);
            if (op.moveTo) {
              const dest = await run.workspace.resolve(op.moveTo);
              const destNow = await current(dest);
              if (destNow !== null)
                throw new PatchError(`cannot move ${rel} to ${run.workspace.relative(dest)}: it exists`);
              set(abs, null);
              set(dest, next);
              summary.push(`R ${rel} -> ${run.workspace.relative(dest)}`);
            } else {
              set(abs, next);
              summary.push(`M ${rel}`);
            }
          }
        }
      } catch (err) {
        if (err instanceof PatchError) throw new ToolError(`patch not applied, no file changed: ${err.message}`);
        throw err;
      }
      const changes: FileChange[] = [...state.entries()]
        .filter(([, s]) => s.expected !== s.next)
        .map(([path, s]) => ({ path, expected: s.expected, next: s.next }));
      await commitChanges(changes, (p) => run.workspace.relative(p));
      const written = changes.filter((c) => c.next !== null).map((c) => c.path);
      const extra = await run.afterWrite(written, ctx);
      return {
        content: [
          { type: 'text', text: `applied patch to ${changes.length} file(s):\n${summary.join('\n')}` },
          ...extra,
        ],
        structured: { files: summary },
      };
    },
  };
}
