import {
  ProcessCloseStdinCommand,
  ProcessEndEvent,
  ProcessInputCommand,
  ProcessListCommand,
  ProcessOutputEvent,
  ProcessResizeCommand,
  ProcessSignalCommand,
  ProcessStartCommand,
  type ProcessRefusal,
} from '../../../../protocol/src/process';
import type { FamilyCommand } from '../../../../protocol/src/run';
import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { onPath } from './launch';
import { dataOf, payloadOf, pidOf, ptySize, signalOf, startSpec } from './params';
import { refusalOf } from './refusal';
import { processSettings } from './settings';
import { ProcessTable } from './table';

/**
 * The process family: commands and PTY sessions the gateway starts and drives outside tool
 * calls (features.commands). It registers no tools, only its commands; output and ends go up
 * as run events.
 */
export function registerProcess(_registry: ToolRegistry, run: RunContext): void {
  if (!run.features.commands) return;
  const settings = processSettings(run);
  const table = new ProcessTable(
    run.workspace,
    { ...settings, python: onPath(settings.python) },
    {
      output: (payload) => run.emit(ProcessOutputEvent.type, payload),
      end: (payload) => run.emit(ProcessEndEvent.type, payload),
    },
  );

  // Every handler answers: whatever a payload holds, the refusal goes back instead of a throw.
  const handle = <P, R>(type: FamilyCommand<P, R | ProcessRefusal>, fn: (payload: unknown) => Promise<R> | R) =>
    run.handleCommand(type, async (payload) => {
      try {
        return await fn(payload);
      } catch (err) {
        return refusalOf(err, type.command);
      }
    });
  const ok = { ok: true } as const;

  handle(ProcessStartCommand.type, (p) => table.start(startSpec(p)));
  handle(ProcessInputCommand.type, (p) => {
    const params = payloadOf(p);
    table.get(pidOf(params)).input(dataOf(params.data));
    return ok;
  });
  handle(ProcessCloseStdinCommand.type, (p) => {
    table.get(pidOf(payloadOf(p))).closeStdin();
    return ok;
  });
  handle(ProcessSignalCommand.type, (p) => {
    const params = payloadOf(p);
    const sig = signalOf(params.signal);
    table.get(pidOf(params)).signal(sig);
    return ok;
  });
  handle(ProcessResizeCommand.type, (p) => {
    const params = payloadOf(p);
    const size = ptySize(params.size);
    table.get(pidOf(params)).resize(size);
    return ok;
  });
  run.handleCommand(ProcessListCommand.type, () => ({ processes: table.list() }));
  run.onStop(() => table.stopAll());
}
