import { promises as fs } from 'node:fs';
import type { ProcessInfo, ProcessStartReply } from '../../../../protocol/src/process';
import type { Workspace } from '../../workspace';
import { launch } from './launch';
import { ManagedProcess, type ProcessSink } from './managed';
import type { StartSpec } from './params';
import { Refusal } from './refusal';
import type { ProcessSettings } from './settings';

/** How long a run's stop waits for its killed processes to report their end. */
const STOP_WAIT_MS = 2000;

/**
 * The processes a run's family started and that have not ended: at most `maxLiveProcesses`
 * at once, each found by its pid until its end was sent (a process whose leader exited while
 * something it started still holds its output is live until that closes too).
 */
export class ProcessTable {
  private readonly live = new Map<number, ManagedProcess>();
  /** Starts under way, counted against the limit before they have a pid. */
  private starting = 0;
  private stopped = false;

  constructor(
    private readonly workspace: Workspace,
    private readonly settings: ProcessSettings,
    private readonly sink: ProcessSink,
  ) {}

  async start(spec: StartSpec): Promise<ProcessStartReply> {
    if (this.stopped) throw new Refusal('failed', 'the run is stopping');
    const max = this.settings.maxLiveProcesses;
    if (this.live.size + this.starting >= max)
      throw new Refusal('limit', `${max} processes are already running in this run: wait for one to end`);
    this.starting++;
    try {
      const cwd = await this.workspace.resolve(spec.cwd ?? '.');
      const st = await fs.stat(cwd).catch(() => undefined);
      if (!st) throw new Refusal('not_found', `cwd ${spec.cwd} does not exist`);
      if (!st.isDirectory()) throw new Refusal('invalid', `cwd ${spec.cwd} is not a directory`);
      const launched = await launch({
        cmd: spec.cmd,
        args: spec.args,
        cwd,
        env: { ...process.env, ...(spec.pty ? { TERM: 'xterm-256color' } : {}), ...spec.env },
        stdin: spec.stdin,
        pty: spec.pty,
        python: this.settings.python,
      });
      const info: ProcessInfo = {
        pid: launched.child.pid,
        cmd: spec.cmd,
        args: spec.args,
        cwd,
        env: spec.env,
        ...(spec.tag !== undefined ? { tag: spec.tag } : {}),
        pty: !!spec.pty,
      };
      const p = new ManagedProcess(
        launched,
        info,
        spec.stdin,
        { maxOutputBytes: this.settings.maxOutputBytes, timeoutMs: spec.timeoutMs },
        this.sink,
      );
      this.live.set(p.pid, p);
      void p.ended.then(() => {
        if (this.live.get(p.pid) === p) this.live.delete(p.pid);
      });
      // A stop that came while this one was starting still takes it.
      if (this.stopped) p.kill('the run stopped');
      return { ok: true, pid: p.pid };
    } finally {
      this.starting--;
    }
  }

  /** The live process of a pid; an unknown or ended one is refused. */
  get(pid: number): ManagedProcess {
    const p = this.live.get(pid);
    if (!p) throw new Refusal('not_found', `no running process ${pid} in this run`);
    return p;
  }

  list(): ProcessInfo[] {
    return [...this.live.values()].map((p) => p.info);
  }

  /** Kills every process and waits (a little) for their ends. */
  async stopAll(): Promise<void> {
    this.stopped = true;
    const all = [...this.live.values()];
    for (const p of all) p.kill('the run stopped');
    let timer: NodeJS.Timeout | undefined;
    await Promise.race([
      Promise.all(all.map((p) => p.ended)),
      new Promise((resolve) => (timer = setTimeout(resolve, STOP_WAIT_MS))),
    ]);
    clearTimeout(timer);
  }
}
