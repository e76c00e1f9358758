import { cpSync, existsSync, readdirSync, rmSync } from 'node:fs';
import type { KernelStateSummary, NotKept } from '../../../../protocol/src/suspend';
import type { FamilyState } from '../../portable';
import * as os from 'node:os';
import * as path from 'node:path';
import { Kernel, type KernelLaunch, type Language } from './kernel';
import type { EvalSettings } from './schemas';
import type { KernelLimits, KernelStateReport } from './wire';
import { phase } from '../../util/phases';
import { noLifecycle, type ProcessLifecycle, type RestartCause } from '../../resources';
import { runnerFile } from '../../files';

const LANGUAGES: Language[] = ['python', 'javascript'];

/** Per language, the modules a restore of its kernel will import (written at suspend). */
type ImportsAhead = Partial<Record<Language, string[]>>;

function summaryOf(language: Language, r: KernelStateReport): KernelStateSummary {
  return {
    language,
    variables: r.variables.length,
    modules: Object.keys(r.modules).length,
    bytes: r.bytes,
    serializer: r.serializer,
  };
}

/** The Python kernel's driver script: copied beside the compiled runner by the build (scripts/copy-assets.sh). */
const PYTHON_DRIVER = runnerFile('tools/eval/python/driver.py');

/** The kernel processes of one run: one per language, started on first use, kept until reset or stop. */
export class KernelManager {
  private readonly kernels = new Map<Language, Promise<Kernel>>();
  private readonly queues = new Map<Language, Promise<unknown>>();
  private readonly running = new Set<Language>();
  /** Kernels stopped by a reset or stopAll: their exit is not a death. */
  private readonly killedOnPurpose = new WeakSet<Kernel>();
  /** Why the next kernel of a language replaces one: the last died, or a reset stopped it. */
  private readonly nextStart = new Map<Language, RestartCause>();
  /** Told when a kernel is up and when it is gone, for the run's resource metrics. */
  lifecycle: ProcessLifecycle = noLifecycle;

  constructor(
    private readonly settings: EvalSettings,
    private readonly cwd: string,
  ) {}

  private limits(): KernelLimits {
    const s = this.settings;
    return {
      streamChars: s.streamChars,
      tailChars: s.outputTailChars,
      tableRows: s.tableRows,
      tableColumns: s.tableColumns,
      cellChars: 200,
      reprChars: s.outputHeadChars,
    };
  }

  launchOf(language: Language): KernelLaunch {
    const limits = JSON.stringify(this.limits());
    const mplConfig = process.env.MPLCONFIGDIR ?? path.join(os.tmpdir(), 'tether-matplotlib');
    if (language === 'python') this.seedMatplotlibCache(mplConfig);
    const env: NodeJS.ProcessEnv = {
      ...process.env,
      MPLBACKEND: 'Agg',
      MPLCONFIGDIR: mplConfig,
      PYTHONUNBUFFERED: '1',
      PYTHONIOENCODING: 'utf-8',
    };
    delete env.NODE_OPTIONS;
    if (language === 'python')
      return { language, command: this.settings.python, args: ['-u', PYTHON_DRIVER, limits], cwd: this.cwd, env };
    return {
      language,
      command: this.settings.node,
      args: ['--disable-warning=ExperimentalWarning', runnerFile('tools/eval/javascript/driver.js'), limits],
      cwd: this.cwd,
      env,
    };
  }

  /** Copies the image's prebuilt font cache once, so the first plot of a run skips the font scan. */
  private seedMatplotlibCache(configDir: string): void {
    const seed = this.settings.matplotlibCacheSeed;
    try {
      if (
        !seed ||
        !existsSync(seed) ||
        readdirSync(configDir, { withFileTypes: true }).some((e) => e.name.startsWith('fontlist'))
      )
        return;
    } catch {
      // configDir does not exist yet: seed it.
    }
    try {
      cpSync(seed, configDir, { recursive: true });
    } catch {
      // Only a speed-up: matplotlib builds its own cache when this fails.
    }
  }

  /** The language's kernel, started if there is none (or the last one died). */
  async kernel(language: Language, reset: boolean): Promise<Kernel> {
    const existing = this.kernels.get(language);
    if (existing) {
      const k = await existing.catch(() => undefined);
      if (k?.alive && !reset) return k;
      if (k && !this.killedOnPurpose.has(k)) {
        // A dead kernel whose exit is still being read counts as died, once.
        this.killedOnPurpose.add(k);
        this.nextStart.set(language, k.alive ? 'request' : 'crash');
      }
      k?.kill();
      this.kernels.delete(language);
    }
    const started = phase('eval.kernel_start', { 'eval.language': language }, () =>
      Kernel.start(this.launchOf(language), this.settings.startTimeoutSeconds * 1000),
    );
    this.kernels.set(language, started);
    started.catch(() => this.kernels.get(language) === started && this.kernels.delete(language));
    const k = await started;
    this.lifecycle.started(language, this.nextStart.get(language));
    this.nextStart.delete(language);
    void k.exited.then(() => {
      this.lifecycle.stopped(language);
      if (!this.killedOnPurpose.has(k)) this.nextStart.set(language, 'crash');
      if (this.kernels.get(language) === started) this.kernels.delete(language);
    });
    return k;
  }

  /** Runs fn alone for its language: cells of one interpreter never overlap. */
  exclusive<T>(language: Language, fn: () => Promise<T>): Promise<T> {
    const before = this.queues.get(language) ?? Promise.resolve();
    const turn = async () => {
      this.running.add(language);
      try {
        return await fn();
      } finally {
        this.running.delete(language);
      }
    };
    const run = before.then(turn, turn);
    this.queues.set(
      language,
      run.catch(() => undefined),
    );
    return run;
  }

  /** Whether a cell of this language is running now. */
  busy(language: Language): boolean {
    return this.running.has(language);
  }

  /**
   * Writes each live kernel's variables into `dir` (`python.state`, `javascript.state`), within
   * `budget` bytes in all, each after the cell running now (if any) ends. A kernel that fails to
   * write is named, whole, in what is not kept.
   */
  async suspend(dir: string, budget: number): Promise<FamilyState> {
    const kernels: KernelStateSummary[] = [];
    const notKept: NotKept[] = [];
    const ahead: ImportsAhead = {};
    let left = budget;
    for (const language of LANGUAGES) {
      const k = await this.kernels.get(language)?.catch(() => undefined);
      if (!k?.alive) continue;
      const file = path.join(dir, `${language}.state`);
      try {
        const report = await this.exclusive(language, () => k.state({ t: 'save_state', path: file, limit: left }));
        left = Math.max(0, left - report.bytes);
        kernels.push(summaryOf(language, report));
        ahead[language] = report.imports ?? Object.values(report.modules);
        notKept.push(...report.notKept.map((n) => ({ what: `${language} ${n.what}`, why: n.why })));
      } catch (err) {
        rmSync(file, { force: true });
        notKept.push({ what: `the ${language} kernel's variables`, why: (err as Error).message });
      }
    }
    return {
      counts: Object.fromEntries(kernels.map((k) => [`${k.language} variables`, k.variables])),
      notKept,
      kernels,
      ahead,
    };
  }

  /**
   * Starts the kernels a restore will load into, and imports the modules their state will need,
   * ahead of it. Should the state be torn, each is a new kernel as the first cell would have
   * started, with those modules imported.
   */
  prepare(saved: KernelStateSummary[], ahead: unknown): void {
    const imports = (ahead ?? {}) as ImportsAhead;
    for (const { language } of saved) {
      if (!LANGUAGES.includes(language)) continue;
      const modules = Array.isArray(imports[language]) ? imports[language].filter((m) => typeof m === 'string') : [];
      this.kernel(language, false)
        .then((k) => (modules.length ? this.exclusive(language, () => k.importModules(modules)) : undefined))
        .catch(() => undefined);
    }
  }

  /** Starts a kernel for each state file in `dir` (unless `prepare` did) and loads its variables into it. */
  async restore(dir: string): Promise<FamilyState> {
    const kernels: KernelStateSummary[] = [];
    const notKept: NotKept[] = [];
    for (const language of LANGUAGES) {
      const file = path.join(dir, `${language}.state`);
      if (!existsSync(file)) continue;
      try {
        const k = await this.kernel(language, false);
        const report = await this.exclusive(language, () => k.state({ t: 'load_state', path: file }));
        kernels.push(summaryOf(language, report));
        notKept.push(...report.notKept.map((n) => ({ what: `${language} ${n.what}`, why: n.why })));
      } catch (err) {
        notKept.push({ what: `the ${language} kernel's variables`, why: (err as Error).message });
      }
    }
    return {
      counts: Object.fromEntries(kernels.map((k) => [`${k.language} variables`, k.variables])),
      notKept,
      kernels,
    };
  }

  async stopAll(): Promise<void> {
    const all = [...this.kernels.values()];
    this.kernels.clear();
    await Promise.allSettled(
      all.map(async (p) => {
        const k = await p;
        this.killedOnPurpose.add(k);
        k.kill();
      }),
    );
  }
}
