import { execFile } from 'node:child_process';
import { promises as fs } from 'node:fs';
import * as path from 'node:path';
import type { ToolResult } from '../../../../protocol/src/tools';
import { ToolError, ok, type ToolContext } from '../../tool';
import { resolveBinary } from './binaries';
import { countFindings, FINDING_FORMATS, totalsLine, type FindingFormat } from './checkerTotals';
import type { LspSession } from './session';

const OUTPUT_MAX_LINES = 200;
const OUTPUT_MAX_CHARS = 20_000;
const C_SOURCE_LIMIT = 200;

/** One concrete command that checks a whole project root. */
interface CheckerCommand {
  label: string;
  binary: string;
  args: string[];
  findings: FindingFormat;
}

async function exists(p: string): Promise<boolean> {
  return fs.stat(p).then(
    () => true,
    () => false,
  );
}

async function cSources(root: string): Promise<string[]> {
  const out: string[] = [];
  const walk = async (dir: string): Promise<void> => {
    for (const e of await fs.readdir(dir, { withFileTypes: true }).catch(() => [])) {
      if (out.length >= C_SOURCE_LIMIT) return;
      if (e.isDirectory() && !e.name.startsWith('.') && !['build', 'node_modules'].includes(e.name))
        await walk(path.join(dir, e.name));
      else if (e.isFile() && /\.(c|cc|cpp|cxx)$/.test(e.name)) out.push(path.relative(root, path.join(dir, e.name)));
    }
  };
  await walk(root);
  return out.sort();
}

/** The project checker for a server's root, or why there is none. */
async function checkerFor(serverId: string, root: string, workspaceRoot: string): Promise<CheckerCommand | string> {
  const find = (cmd: string) => resolveBinary(cmd, root, workspaceRoot);
  switch (serverId) {
    case 'typescript': {
      const tsc = await find('tsc');
      if (!tsc) return 'tsc not found (node_modules/.bin or $PATH)';
      const config = (await exists(path.join(root, 'tsconfig.json')))
        ? 'tsconfig.json'
        : (await exists(path.join(root, 'jsconfig.json')))
          ? 'jsconfig.json'
          : undefined;
      if (!config) return 'no tsconfig.json or jsconfig.json in this root for tsc to check';
      return {
        label: `tsc --noEmit -p ${config}`,
        binary: tsc,
        args: ['--noEmit', '--pretty', 'false', '-p', config],
        findings: FINDING_FORMATS.tsc,
      };
    }
    case 'pyright': {
      const pyright = await find('pyright');
      return pyright
        ? { label: 'pyright', binary: pyright, args: [], findings: FINDING_FORMATS.pyright }
        : 'the pyright CLI was not found';
    }
    case 'gopls': {
      const go = await find('go');
      return go
        ? { label: 'go vet ./...', binary: go, args: ['vet', './...'], findings: FINDING_FORMATS.goVet }
        : 'go not found';
    }
    case 'clangd': {
      const sources = await cSources(root);
      if (sources.length === 0) return 'no C/C++ sources in this root';
      const cpp = sources.some((s) => !s.endsWith('.c'));
      const compiler =
        (await find(cpp ? 'g++' : 'gcc')) ?? (await find(cpp ? 'clang++' : 'clang')) ?? (await find('cc'));
      if (!compiler) return 'no C compiler (gcc, clang, cc) found';
      const name = path.basename(compiler);
      return {
        label: `${name} -fsyntax-only -Wall (${sources.length} file(s))`,
        binary: compiler,
        args: ['-fsyntax-only', '-Wall', '-I', '.', ...sources],
        findings: FINDING_FORMATS.compiler,
      };
    }
    case 'rust-analyzer': {
      const cargo = await find('cargo');
      return cargo
        ? {
            label: 'cargo check',
            binary: cargo,
            args: ['check', '--offline', '--message-format', 'short'],
            findings: FINDING_FORMATS.compiler,
          }
        : 'cargo not found';
    }
    case 'dart': {
      const dart = await find('dart');
      return dart
        ? { label: 'dart analyze', binary: dart, args: ['analyze'], findings: FINDING_FORMATS.dart }
        : 'dart not found';
    }
    default:
      return 'no project checker known';
  }
}

function run(
  cmd: CheckerCommand,
  cwd: string,
  timeoutMs: number,
  signal: AbortSignal,
): Promise<{ code: number | null; output: string; ms: number; timedOut: boolean }> {
  const t0 = Date.now();
  return new Promise((resolve) => {
    execFile(
      cmd.binary,
      cmd.args,
      {
        cwd,
        timeout: timeoutMs,
        signal,
        maxBuffer: 16 * 1024 * 1024,
        env: { ...process.env, GOPROXY: process.env.GOPROXY ?? 'off', GOFLAGS: process.env.GOFLAGS ?? '-mod=mod' },
      },
      (err, stdout, stderr) => {
        const e = err as (NodeJS.ErrnoException & { killed?: boolean; code?: number | string }) | null;
        const code = e ? (typeof e.code === 'number' ? e.code : null) : 0;
        resolve({ code, output: `${stdout}${stderr}`, ms: Date.now() - t0, timedOut: Boolean(e?.killed) });
      },
    );
  });
}

/** The output with paths made workspace-relative. */
function relative(output: string, root: string, display: (abs: string) => string): string {
  const prefix = root.endsWith('/') ? root : `${root}/`;
  const rel = display(root);
  return output
    .split(prefix)
    .join(rel === '' || rel === '.' ? '' : `${rel}/`)
    .trimEnd();
}

/** The output within the result's bounds, and whether any of it was left out. */
function bounded(text: string): { text: string; cut: boolean } {
  let cut = false;
  const lines = text.split('\n');
  if (lines.length > OUTPUT_MAX_LINES) {
    text = `${lines.slice(0, OUTPUT_MAX_LINES).join('\n')}\n… showing ${OUTPUT_MAX_LINES} of ${lines.length} lines`;
    cut = true;
  }
  if (text.length > OUTPUT_MAX_CHARS) {
    text = `${text.slice(0, OUTPUT_MAX_CHARS)}\n… output cut at ${OUTPUT_MAX_CHARS} characters`;
    cut = true;
  }
  return { text, cut };
}

/** `diagnostics "*"`: runs each root's project checker (not the server) and says which ran. */
export async function runProjectCheckers(session: LspSession, ctx: ToolContext): Promise<ToolResult> {
  const sections: string[] = [];
  const ran: {
    checker: string;
    root: string;
    exitCode: number | null;
    errors: number;
    warnings: number;
    files: number;
  }[] = [];
  for (const spec of session.supervisor.servers) {
    for (const root of await session.supervisor.roots.allRoots(spec)) {
      const where = session.supervisor.describeRoot(root);
      const cmd = await checkerFor(spec.id, root, session.workspace.root);
      if (typeof cmd === 'string') {
        sections.push(`${spec.id} root ${where}: no checker ran: ${cmd}`);
        continue;
      }
      ctx.progress(`running ${cmd.label} in ${where}`);
      const r = await run(cmd, root, session.settings.checkerTimeoutMs, ctx.signal);
      const full = relative(r.output, root, (a) => session.format.display(a));
      const totals = countFindings(full, cmd.findings);
      ran.push({
        checker: cmd.label,
        root: where,
        exitCode: r.code,
        errors: totals.errors,
        warnings: totals.warnings,
        files: totals.files,
      });
      const verdict = r.timedOut
        ? `stopped after ${session.settings.checkerTimeoutMs} ms`
        : r.code === 0
          ? 'clean (exit 0)'
          : `exit ${r.code ?? 'signal'}`;
      const body = bounded(full);
      const lead = r.timedOut ? '' : `\n${totalsLine(totals, r.code, body.cut)}`;
      sections.push(
        `checker: ${cmd.label} in ${where} — ${verdict}, ${(r.ms / 1000).toFixed(1)} s${lead}${body.text ? `\n${body.text}` : ''}`,
      );
    }
  }
  if (sections.length === 0)
    throw new ToolError('no project root found in the workspace for any known checker; see lsp status');
  return ok(sections.join('\n\n'), { ran });
}
