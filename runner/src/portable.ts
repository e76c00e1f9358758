import { createHash, randomBytes } from 'node:crypto';
import { createReadStream, promises as fs } from 'node:fs';
import * as path from 'node:path';
import { logger } from './log';
import type {
  FamilyStateSummary,
  KernelStateSummary,
  NotKept,
  RestoreParams,
  RestoreResult,
  SuspendParams,
  SuspendResult,
} from '../../protocol/src/suspend';

/** What one family wrote into its directory (suspend) or got back from it (restore). */
export interface FamilyState {
  counts: Record<string, number>;
  notKept: NotKept[];
  /** The eval family's kernels, one summary each. */
  kernels?: KernelStateSummary[];
  /** Written with the state and handed to `prepare` before the restore (the eval family: modules to import). */
  ahead?: unknown;
}

/**
 * One family's part in a pause, the same shape for every family: `suspend` writes its state
 * as files into `dir` (its own directory, empty) within `budget` bytes and says what it could
 * not keep; `restore` reads them back from `dir`, which then holds exactly what its suspend
 * wrote, every file checked. A family with nothing to write (a debug session) only reports.
 */
export interface PortableHook {
  /** Large state (kernels' variables): written after the other families, in the budget they left. */
  large?: boolean;
  suspend(dir: string, budget: number): Promise<FamilyState>;
  /**
   * Called once the manifest names this family's state, while its files are still being checked:
   * starts what `restore` will need (its processes), reading nothing from the state. Whatever it
   * starts must be harmless when the state then turns out torn and `restore` is never called.
   */
  prepare?(saved: { kernels?: KernelStateSummary[]; ahead?: unknown }): void;
  restore(dir: string): Promise<FamilyState>;
}

type Checked = { ok: true; manifest: Manifest } | { ok: false; outcome: 'none' | 'torn'; problem: string };

export const MANIFEST = 'manifest.json';
const FORMAT = 'tether-portable-state';
const VERSION = 1;

interface ManifestFile {
  path: string;
  bytes: number;
  sha256: string;
}

interface Manifest {
  format: typeof FORMAT;
  version: typeof VERSION;
  runId: string;
  conversationId: string;
  suspendedAt: string;
  reason: string;
  /** The directory beside the manifest that holds this state's files. */
  generation: string;
  limitBytes: number;
  families: (FamilyStateSummary & {
    notKept: NotKept[];
    kernels?: KernelStateSummary[];
    ahead?: unknown;
    files: ManifestFile[];
  })[];
  /** What could not be written, named at suspend. */
  notKept: NotKept[];
}

/** Default bound on the state's bytes (setting `portable.maxStateMB`). */
export const DEFAULT_MAX_STATE_MB = 2048;

/**
 * A run's portable state in its workspace: `<stateDir>/manifest.json` names a generation
 * directory `<stateDir>/<generation>/<family>/…` and the size and sha-256 of every file in it.
 * The files are written first, the manifest last (temp file, fsync, rename), so a state is
 * either whole or absent: a missing manifest is no state, and a manifest that does not parse,
 * is of another format, or names a file that is missing or differs is a torn state, of which
 * nothing is restored.
 */
export class PortableState {
  private readonly hooks = new Map<string, PortableHook>();

  constructor(
    private readonly dir: string,
    private readonly run: { runId: string; conversationId: string },
    private readonly limitBytes: number,
  ) {}

  /** A family's hooks; families suspend in the order they register and restore in the same order. */
  keep(family: string, hook: PortableHook): void {
    if (this.hooks.has(family)) throw new Error(`portable state hooks for ${family} registered twice`);
    this.hooks.set(family, hook);
  }

  async suspend(params: SuspendParams = {}): Promise<SuspendResult> {
    const generation = `g-${Date.now().toString(36)}-${randomBytes(4).toString('hex')}`;
    const partial = path.join(this.dir, `${generation}.partial`);
    await fs.mkdir(partial, { recursive: true, mode: 0o700 });
    const families: Manifest['families'] = [];
    const notKept: NotKept[] = [];
    let used = 0;
    const order = [...this.hooks].sort(([, a], [, b]) => Number(!!a.large) - Number(!!b.large));
    for (const [family, hook] of order) {
      const own = path.join(partial, family);
      await fs.mkdir(own, { mode: 0o700 });
      let state: FamilyState;
      try {
        state = await hook.suspend(own, Math.max(0, this.limitBytes - used));
      } catch (err) {
        await fs.rm(own, { recursive: true, force: true });
        notKept.push({ what: `the ${family} state`, why: `it could not be written: ${(err as Error).message}` });
        continue;
      }
      const files = await listFiles(partial, own);
      const bytes = files.reduce((n, f) => n + f.bytes, 0);
      if (used + bytes > this.limitBytes) {
        await fs.rm(own, { recursive: true, force: true });
        notKept.push(
          {
            what: `the ${family} state`,
            why: `its ${bytes} bytes would pass the state's limit of ${this.limitBytes} bytes`,
          },
          ...state.notKept,
        );
        continue;
      }
      used += bytes;
      notKept.push(...state.notKept);
      families.push({
        family,
        bytes,
        counts: state.counts,
        notKept: state.notKept,
        kernels: state.kernels,
        ahead: state.ahead,
        files,
      });
    }
    const manifest: Manifest = {
      format: FORMAT,
      version: VERSION,
      runId: this.run.runId,
      conversationId: this.run.conversationId,
      suspendedAt: new Date().toISOString(),
      reason: params.reason ?? '',
      generation,
      limitBytes: this.limitBytes,
      families,
      notKept,
    };
    const final = path.join(this.dir, generation);
    await fs.rename(partial, final);
    await syncDir(final);
    const text = `${JSON.stringify(manifest, null, 1)}\n`;
    const tmp = path.join(this.dir, `.${MANIFEST}.${randomBytes(6).toString('hex')}.tmp`);
    const handle = await fs.open(tmp, 'wx', 0o600);
    try {
      await handle.writeFile(text);
      await handle.sync();
    } finally {
      await handle.close();
    }
    await fs.rename(tmp, path.join(this.dir, MANIFEST));
    await syncDir(this.dir);
    await this.removeExcept(generation);
    await chownToWorkspaceOwner(this.dir);
    return {
      written: true,
      bytes: used + Buffer.byteLength(text),
      limitBytes: this.limitBytes,
      families: families.map(({ family, bytes, counts }) => ({ family, bytes, counts })),
      kernels: families.flatMap((f) => f.kernels ?? []),
      notKept,
    };
  }

  async restore(params: RestoreParams = {}): Promise<RestoreResult> {
    const began = performance.now();
    const read = await this.readManifest(params.forkOf);
    // The families start their processes while every file is checked (a 100 MB kernel state
    // takes ~120 ms to hash here, about what a kernel takes to start beside it).
    if (read.ok) for (const saved of read.manifest.families) this.hooks.get(saved.family)?.prepare?.(saved);
    const checked = read.ok ? await this.verify(read.manifest) : read;
    const checkedMs = performance.now() - began;
    if (!checked.ok) {
      const result: RestoreResult = {
        outcome: checked.outcome,
        problem: checked.problem,
        families: [],
        kernels: [],
        notKept: [],
        notice:
          checked.outcome === 'none'
            ? 'This run was resumed without saved state: variables, staged edits and workers from before the pause are gone.'
            : `This run was resumed, but its saved state was incomplete (${checked.problem}), so none of it was restored: variables, staged edits and workers from before the pause are gone.`,
      };
      return result;
    }
    const { manifest } = checked;
    const base = path.join(this.dir, manifest.generation);
    const families: FamilyStateSummary[] = [];
    const kernels: KernelStateSummary[] = [];
    const notKept: NotKept[] = [...manifest.notKept];
    const familyMs: Record<string, number> = {};
    for (const saved of manifest.families) {
      const from = performance.now();
      const hook = this.hooks.get(saved.family);
      if (!hook) {
        notKept.push({
          what: `the ${saved.family} state`,
          why: `the ${saved.family} tools are not enabled in the resumed run`,
        });
        continue;
      }
      try {
        const back = await hook.restore(path.join(base, saved.family));
        families.push({ family: saved.family, bytes: saved.bytes, counts: back.counts });
        kernels.push(...(back.kernels ?? []));
        notKept.push(...back.notKept);
      } catch (err) {
        notKept.push({ what: `the ${saved.family} state`, why: `it could not be restored: ${(err as Error).message}` });
      }
      familyMs[saved.family] = Math.round(performance.now() - from);
    }
    if (!params.keep) await this.clear();
    logger.info(
      { checkedMs: Math.round(checkedMs), familyMs, ms: Math.round(performance.now() - began) },
      'portable state restored',
    );
    return {
      outcome: 'restored',
      suspendedAt: manifest.suspendedAt,
      families,
      kernels,
      notKept,
      // Only the state its parent wrote makes this a fork's first start; its own is a resume.
      notice: noticeOf(
        manifest.suspendedAt,
        families,
        kernels,
        notKept,
        manifest.runId === params.forkOf ? params.forkOf : undefined,
      ),
    };
  }

  /** The manifest, once it is whole and this run's; otherwise why not. Its files are not looked at yet. */
  private async readManifest(forkOf?: string): Promise<Checked> {
    let text: string;
    try {
      text = await fs.readFile(path.join(this.dir, MANIFEST), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT')
        return {
          ok: false,
          outcome: 'none',
          problem: 'no manifest in the workspace: the run was never suspended, or its state was already restored',
        };
      return { ok: false, outcome: 'torn', problem: `the manifest cannot be read: ${(err as Error).message}` };
    }
    let manifest: Manifest;
    try {
      manifest = JSON.parse(text) as Manifest;
    } catch {
      return { ok: false, outcome: 'torn', problem: 'the manifest is truncated or not JSON' };
    }
    if (manifest?.format !== FORMAT || manifest.version !== VERSION)
      return { ok: false, outcome: 'torn', problem: `the manifest is not a ${FORMAT} of version ${VERSION}` };
    if (
      !Array.isArray(manifest.families) ||
      typeof manifest.generation !== 'string' ||
      !/^g-[\w-]+$/.test(manifest.generation)
    )
      return { ok: false, outcome: 'torn', problem: 'the manifest lacks its families or generation' };
    // A fork starts from its parent's state; any other run's state is not this run's to take.
    if (manifest.runId !== this.run.runId && manifest.runId !== forkOf)
      return { ok: false, outcome: 'torn', problem: `the state is of another run (${manifest.runId})` };
    return { ok: true, manifest };
  }

  /** The manifest again once every file it names is there, of its size and checksum; otherwise why not. */
  private async verify(manifest: Manifest): Promise<Checked> {
    const base = path.join(this.dir, manifest.generation);
    for (const family of manifest.families) {
      for (const f of family.files ?? []) {
        const abs = path.resolve(base, f.path);
        if (!abs.startsWith(base + path.sep))
          return { ok: false, outcome: 'torn', problem: `the manifest names a file outside its state: ${f.path}` };
        let st: Awaited<ReturnType<typeof fs.stat>>;
        try {
          st = await fs.stat(abs);
        } catch {
          return { ok: false, outcome: 'torn', problem: `${f.path} is missing` };
        }
        if (st.size !== f.bytes)
          return {
            ok: false,
            outcome: 'torn',
            problem: `${f.path} holds ${st.size} bytes, the manifest says ${f.bytes}`,
          };
        if ((await sha256(abs)) !== f.sha256)
          return { ok: false, outcome: 'torn', problem: `${f.path} does not match its checksum` };
      }
    }
    return { ok: true, manifest };
  }

  /** Removes the state: the manifest first, so a state is never seen half-removed. */
  async clear(): Promise<void> {
    await fs.rm(path.join(this.dir, MANIFEST), { force: true });
    await this.removeExcept(undefined);
  }

  private async removeExcept(generation: string | undefined): Promise<void> {
    const entries = await fs.readdir(this.dir).catch(() => [] as string[]);
    await Promise.all(
      entries
        .filter((e) => e !== MANIFEST && e !== generation && (e.startsWith('g-') || e.startsWith(`.${MANIFEST}.`)))
        .map((e) => fs.rm(path.join(this.dir, e), { recursive: true, force: true })),
    );
  }
}

/** The words a model reads first after the resume: what came back, what did not, and what to do. */
export function noticeOf(
  suspendedAt: string,
  families: FamilyStateSummary[],
  kernels: KernelStateSummary[],
  notKept: NotKept[],
  forkOf?: string,
): string {
  const lines = [
    forkOf
      ? `This run is a fork of run ${forkOf}: it started from that run's state at ${suspendedAt}, on a copy of its workspace.`
      : `This run was paused (at ${suspendedAt}) and has been resumed on a new sandbox over the same workspace.`,
  ];
  const back: string[] = [];
  for (const k of kernels)
    back.push(
      `the ${k.language} kernel's variables (${k.variables}${k.modules ? `, and ${k.modules} imported modules` : ''})`,
    );
  for (const f of families) {
    const counts = Object.entries(f.counts)
      .filter(([, n]) => n > 0)
      .map(([what, n]) => `${n} ${what}`);
    if (counts.length && f.family !== 'eval') back.push(`${f.family}: ${counts.join(', ')}`);
  }
  lines.push(back.length ? `Kept: ${back.join('; ')}.` : 'Nothing of the state needed keeping.');
  lines.push('Language servers start again on first use; files in the workspace are as they were.');
  if (notKept.length) {
    lines.push('Not kept:');
    for (const n of notKept.slice(0, 30)) lines.push(`- ${n.what}: ${n.why}`);
    if (notKept.length > 30) lines.push(`- and ${notKept.length - 30} more`);
  }
  return lines.join('\n');
}

/** The files under `dir`, relative to `base`, with their sizes and checksums. */
async function listFiles(base: string, dir: string): Promise<ManifestFile[]> {
  const out: ManifestFile[] = [];
  for (const e of await fs.readdir(dir, { withFileTypes: true })) {
    const abs = path.join(dir, e.name);
    if (e.isDirectory()) out.push(...(await listFiles(base, abs)));
    else if (e.isFile()) {
      const handle = await fs.open(abs, 'r');
      try {
        await handle.sync();
        out.push({ path: path.relative(base, abs), bytes: (await handle.stat()).size, sha256: await sha256(abs) });
      } finally {
        await handle.close();
      }
    }
  }
  return out.sort((a, b) => a.path.localeCompare(b.path));
}

/**
 * Read in 1 MiB chunks: at the stream's default of 64 KiB, a 100 MB kernel state took 320 ms
 * here, most of it one thread-pool round trip per chunk; at 1 MiB, 120 ms (the hash alone ~70).
 */
const HASH_CHUNK = 1 << 20;

function sha256(abs: string): Promise<string> {
  return new Promise((resolve, reject) => {
    const hash = createHash('sha256');
    createReadStream(abs, { highWaterMark: HASH_CHUNK })
      .on('data', (chunk) => hash.update(chunk))
      .on('error', reject)
      .on('end', () => resolve(hash.digest('hex')));
  });
}

async function syncDir(dir: string): Promise<void> {
  const handle = await fs.open(dir, 'r').catch(() => undefined);
  if (!handle) return;
  await handle.sync().catch(() => undefined);
  await handle.close();
}

/**
 * A runner running as root (some images) leaves the state owned by the workspace's owner, the
 * run's user, as a runner running as that user does by itself.
 */
async function chownToWorkspaceOwner(stateDir: string): Promise<void> {
  if (process.getuid?.() !== 0) return;
  const owner = await fs.stat(path.dirname(stateDir)).catch(() => undefined);
  if (!owner || owner.uid === 0) return;
  const visit = async (p: string): Promise<void> => {
    await fs.lchown(p, owner.uid, owner.gid).catch(() => undefined);
    const st = await fs.lstat(p).catch(() => undefined);
    if (st?.isDirectory()) for (const e of await fs.readdir(p)) await visit(path.join(p, e));
  };
  await visit(stateDir);
}

/** A family whose state is one JSON document: the usual hook, in the same shape for each. */
export function jsonHook<T>(
  file: string,
  save: () => { data: T } & FamilyState,
  load: (data: T) => FamilyState,
): PortableHook {
  return {
    async suspend(dir, budget) {
      const { data, ...state } = save();
      const text = JSON.stringify(data);
      if (Buffer.byteLength(text) > budget)
        throw new Error(`its ${Buffer.byteLength(text)} bytes pass the ${budget} bytes left`);
      await fs.writeFile(path.join(dir, file), text, { mode: 0o600, flag: 'wx' });
      return state;
    },
    async restore(dir) {
      return load(JSON.parse(await fs.readFile(path.join(dir, file), 'utf8')) as T);
    },
  };
}
