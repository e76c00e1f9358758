import type { ChildProcess } from 'node:child_process';

/** A process the runner started that the kernel (or anyone) SIGKILLed. */
export interface KilledChild {
  /** What it was to the run ("the eval kernel"). */
  what: string;
  /** Which one ("python"), when there are several of its kind. */
  detail?: string;
  pid: number;
  at: number;
}

const KEEP = 32;
const killed: KilledChild[] = [];
const listeners = new Set<() => void>();

/**
 * Names a process the runner started ("the eval kernel (python)"), so that when it dies of
 * SIGKILL an OOM kill in the run can say what it hit, and is noticed at once rather than at
 * the next poll of the cgroup's counter.
 */
export function nameChild(child: ChildProcess, what: string, detail?: string): void {
  const pid = child.pid;
  if (!pid) return;
  child.once('exit', (_code, signal) => {
    if (signal !== 'SIGKILL') return;
    killed.push({ what, detail, pid, at: Date.now() });
    if (killed.length > KEEP) killed.shift();
    for (const l of listeners) l();
  });
}

/** Named children SIGKILLed at or after `since` (ms since the epoch), oldest first. */
export function killedSince(since: number): KilledChild[] {
  return killed.filter((k) => k.at >= since);
}

/** Calls `fn` whenever a named child dies of SIGKILL; returns how to stop. */
export function onChildKilled(fn: () => void): () => void {
  listeners.add(fn);
  return () => listeners.delete(fn);
}
