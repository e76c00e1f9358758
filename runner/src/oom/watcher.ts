import { writeFileSync } from 'node:fs';
import { OOM_EXIT_CODE, OOM_MESSAGE_PREFIX } from '../../../protocol/src/transport';
import { logger } from '../log';
import { type KilledChild, killedSince, onChildKilled } from './children';
import { locateOomCounter, type OomCounter, OomKillsReader, readMemoryLimit } from './cgroup';

export interface OomWatchOptions {
  /** Where the reason goes: the container's `terminationMessagePath`. */
  messagePath: string;
  /** Ends the runner with this code (`OOM_EXIT_CODE`). */
  exit: (code: number) => void;
  /** Where /proc and /sys are (tests). */
  root?: string;
  /** How often the counter is read; a named child's SIGKILL reads it at once. */
  intervalMs?: number;
  /** How long a kill found by polling waits for a named child's exit to say who it was. */
  nameWaitMs?: number;
}

export interface OomWatch {
  counter: OomCounter;
  stop(): void;
}

/** A named child killed this long before the counter moved is taken for the kill's victim. */
const VICTIM_WINDOW_MS = 1500;

/** The running watch's check, for `checkOomBeforeAnswer`. */
let active: ((now: boolean) => void) | undefined;

/**
 * Reads the counter before a tool's answer leaves (one `pread` of a held descriptor): a kill the next poll
 * would find ends the runner now, so no answer — say, of a cell whose subprocess was the
 * victim — leaves after the run is dead.
 */
export function checkOomBeforeAnswer(): void {
  active?.(true);
}

/** The termination message: what was killed, and at which limit. */
export function oomMessage(kills: number, victims: KilledChild[], limit: string | undefined): string {
  const named = victims.map((v) => `${v.what} (${[v.detail, `pid ${v.pid}`].filter(Boolean).join(', ')})`);
  const at = `at the run's memory limit${limit ? ` (${limit})` : ''}`;
  let what: string;
  if (named.length === 0)
    what = kills > 1 ? `${kills} processes in the run were killed` : 'a process in the run was killed';
  else if (kills > named.length || named.length > 1)
    what = `${Math.max(kills, named.length)} processes were killed, among them ${named.join(' and ')},`;
  else what = `${named[0]} was killed`;
  return `${OOM_MESSAGE_PREFIX}: ${what} ${at}`;
}

/**
 * Ends the runner when the kernel OOM-kills any process of its memory cgroup, as Kubernetes
 * on cgroup v2 ends a container (`memory.oom.group`): a run whose kernel or language server
 * vanished is in a state nobody asked for. On cgroup v1 the kernel kills only the victim, so
 * the runner watches the cgroup's `oom_kill` counter itself, writes why to the container's
 * termination message and exits with `OOM_EXIT_CODE`. Undefined (and one log line) where
 * there is no counter to watch.
 */
export function watchOomKills(opts: OomWatchOptions): OomWatch | undefined {
  const counter = locateOomCounter(opts.root);
  if ('missing' in counter) {
    logger.info({ reason: counter.missing }, 'OOM kills in the run are not watched');
    return undefined;
  }
  const counterFile = new OomKillsReader(counter.file);
  let seen = counterFile.read() ?? 0;
  let kills = 0;
  let detectedAt = 0;
  let pending: NodeJS.Timeout | undefined;
  let done = false;

  const finish = () => {
    if (done) return;
    done = true;
    stop();
    const victims = killedSince(detectedAt - VICTIM_WINDOW_MS);
    const message = oomMessage(kills, victims, readMemoryLimit(counter.limitFile));
    try {
      writeFileSync(opts.messagePath, message);
    } catch (err) {
      logger.warn({ err: (err as Error).message, path: opts.messagePath }, 'could not write the termination message');
    }
    logger.error({ message, kills }, 'an OOM kill in the run: ending it');
    opts.exit(OOM_EXIT_CODE);
  };

  /** `now`: a named child died of SIGKILL, or an answer is about to leave; no waiting for names. */
  const check = (now: boolean) => {
    if (done) return;
    if (pending) {
      if (now) finish();
      return;
    }
    const n = counterFile.read();
    if (n === undefined || n <= seen) return;
    kills = n - seen;
    seen = n;
    detectedAt = Date.now();
    // The kernel counts the kill before it sends SIGKILL, so polling can see it before the
    // victim's exit is reaped: a moment's wait lets a named child say who it was.
    if (now || killedSince(detectedAt - VICTIM_WINDOW_MS).length) finish();
    else pending = setTimeout(finish, opts.nameWaitMs ?? 250);
  };

  const timer = setInterval(() => check(false), opts.intervalMs ?? 1000);
  timer.unref();
  const off = onChildKilled(() => check(true));
  active = check;
  const stop = () => {
    clearInterval(timer);
    off();
    counterFile.close();
    if (active === check) active = undefined;
  };
  logger.info({ file: counter.file, cgroup: `v${counter.version}` }, 'watching OOM kills in the run');
  return {
    counter,
    stop: () => {
      done = true;
      clearTimeout(pending);
      stop();
    },
  };
}
