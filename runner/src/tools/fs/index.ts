import {
  FsListCommand,
  FsMakeDirCommand,
  FsMoveCommand,
  FsReadCommand,
  FsRemoveCommand,
  FsStatCommand,
  FsUnwatchCommand,
  FsWatchCommand,
  FsWatchEvent,
  FsWriteCommand,
  type FsReply,
} from '../../../../protocol/src/fs';
import type { FamilyCommand } from '../../../../protocol/src/run';
import type { ToolRegistry } from '../../registry';
import type { RunContext } from '../../run';
import { base64Arg, FsOps, pathArg } from './ops';
import { Owners } from './owners';
import { FsPaths } from './paths';
import { FsFailure, fsRefusalOf } from './refusal';
import { WatchSet } from './watches';

/**
 * The fs family: the workspace's files as a file system for the gateway, outside tool calls
 * (features.commands). It registers no tools, only its commands; watch changes go up as run
 * events.
 */
export function registerFs(_registry: ToolRegistry, run: RunContext): void {
  if (!run.features.commands) return;
  const paths = new FsPaths(run.workspace);
  const ops = new FsOps(paths, new Owners());
  const watches = new WatchSet(paths, (payload) => run.emit(FsWatchEvent.type, payload));

  // Every handler answers: whatever a payload holds, the refusal goes back instead of a throw.
  const handle = <P, T>(type: FamilyCommand<P, FsReply<T>>, fn: (params: Record<string, unknown>) => Promise<T> | T) =>
    run.handleCommand(type, async (payload): Promise<FsReply<T>> => {
      const params = (typeof payload === 'object' && payload !== null ? payload : {}) as Record<string, unknown>;
      try {
        return { ok: true, ...(await fn(params)) };
      } catch (err) {
        return fsRefusalOf(err, named(params) || type.command, type.command);
      }
    });

  handle(FsStatCommand.type, (p) => ops.stat(pathArg(p.path)));
  handle(FsListCommand.type, (p) => ops.list(pathArg(p.path), p.depth));
  handle(FsMakeDirCommand.type, (p) => ops.mkdir(pathArg(p.path)));
  handle(FsMoveCommand.type, (p) => ops.move(pathArg(p.from, 'from'), pathArg(p.to, 'to')));
  handle(FsRemoveCommand.type, (p) => ops.remove(pathArg(p.path)));
  handle(FsReadCommand.type, (p) => ops.read(pathArg(p.path), p.maxBytes));
  handle(FsWriteCommand.type, (p) => ops.write(pathArg(p.path), base64Arg(p.data)));
  handle(FsWatchCommand.type, (p) => {
    if (p.recursive !== undefined && typeof p.recursive !== 'boolean')
      throw new FsFailure('invalid', 'recursive must be a boolean');
    return watches.watch(pathArg(p.path), p.recursive === true);
  });
  handle(FsUnwatchCommand.type, (p) => {
    if (typeof p.watchId !== 'string') throw new FsFailure('invalid', 'watchId must be a string');
    watches.unwatch(p.watchId);
    return {};
  });
  run.onStop(() => watches.closeAll());
}

/** The path(s) a command's refusal names, as the caller gave them. */
function named(params: Record<string, unknown>): string {
  if (typeof params.path === 'string') return params.path;
  if (typeof params.from === 'string' && typeof params.to === 'string') return `${params.from} → ${params.to}`;
  return '';
}
