import { readdirSync, readFileSync } from 'node:fs';

/** Signals a whole process group; a group already gone (ESRCH) is fine, anything else throws. */
export function signalGroup(pgid: number, sig: NodeJS.Signals): void {
  try {
    process.kill(-pgid, sig);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ESRCH') throw err;
  }
}

/**
 * Signals every process of a session (found in /proc), whatever process group it moved to: a
 * PTY's shell puts each job in a group of its own, all within the session it leads.
 */
export function signalSession(sid: number, sig: NodeJS.Signals): void {
  signalGroup(sid, sig);
  let pids: string[];
  try {
    pids = readdirSync('/proc').filter((d) => /^\d+$/.test(d));
  } catch {
    return;
  }
  for (const pid of pids) {
    if (sessionOf(pid) !== sid) continue;
    try {
      process.kill(Number(pid), sig);
    } catch {
      // Gone meanwhile, or not ours to signal.
    }
  }
}

/** The session id of a process from /proc/PID/stat: the fourth field after the command's `)`. */
function sessionOf(pid: string): number | undefined {
  let stat: string;
  try {
    stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
  } catch {
    return undefined;
  }
  const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
  return Number(fields[3]);
}
