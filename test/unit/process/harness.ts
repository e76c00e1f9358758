import { readdirSync, readFileSync } from 'node:fs';
import {
  ProcessEndEvent,
  ProcessOutputEvent,
  type ProcessEndPayload,
  type ProcessOutputPayload,
  type ProcessStream,
} from '../../../protocol/src/process';
import type { FamilyCommand, RunEventParams } from '../../../protocol/src/run';
import { runnerFor } from '../../helpers/runner';

/** A run with features.commands, its run events kept, and its commands called as the gateway does. */
export async function commandsRun(settings: Record<string, unknown> = {}, commands = true) {
  const r = await runnerFor({ commands }, settings);
  const events: RunEventParams[] = [];
  r.run.sendEvent = (e) => events.push(e);
  const command = <P, R>(type: FamilyCommand<P, R>, payload: P): Promise<R> =>
    r.run.command({ family: type.family, command: type.command, payload }) as Promise<R>;
  const outputs = (pid: number) =>
    events
      .filter((e) => e.kind === ProcessOutputEvent.type.kind && (e.payload as ProcessOutputPayload).pid === pid)
      .map((e) => e.payload as ProcessOutputPayload);
  const output = (pid: number, stream?: ProcessStream) =>
    Buffer.concat(
      outputs(pid)
        .filter((o) => !stream || o.stream === stream)
        .map((o) => Buffer.from(o.data, 'base64')),
    ).toString('utf8');
  const endOf = (pid: number) =>
    events.find((e) => e.kind === ProcessEndEvent.type.kind && (e.payload as ProcessEndPayload).pid === pid)?.payload as
      | ProcessEndPayload
      | undefined;
  const ended = async (pid: number, ms = 10_000): Promise<ProcessEndPayload> => {
    await until(() => endOf(pid) !== undefined, ms);
    return endOf(pid)!;
  };
  return { ...r, events, command, outputs, output, endOf, ended };
}

export async function until(cond: () => boolean, ms = 10_000): Promise<void> {
  const end = Date.now() + ms;
  while (!cond()) {
    if (Date.now() > end) throw new Error('condition not met in time');
    await new Promise((r) => setTimeout(r, 10));
  }
}

/** Whether a pid runs (a zombie does not count). */
export function alive(pid: number): boolean {
  try {
    return !readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.startsWith('Z');
  } catch {
    return false;
  }
}

/** The pids of a process group, from /proc. */
export function groupMembers(pgid: number): number[] {
  const pids: number[] = [];
  for (const d of readdirSync('/proc')) {
    if (!/^\d+$/.test(d)) continue;
    try {
      const stat = readFileSync(`/proc/${d}/stat`, 'utf8');
      const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
      if (Number(fields[2]) === pgid && fields[0] !== 'Z') pids.push(Number(d));
    } catch {
      // gone
    }
  }
  return pids;
}

export const b64 = (s: string) => Buffer.from(s).toString('base64');
