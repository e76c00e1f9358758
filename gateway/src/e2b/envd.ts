import { create } from '@bufbuild/protobuf';
import { timestampFromMs } from '@bufbuild/protobuf/wkt';
import { Code, ConnectError, type ConnectRouter, type HandlerContext } from '@connectrpc/connect';
import { envdFilesystem as fsPb, envdProcess as procPb } from '@tether/contract/e2b';
import type { FsEntry, FsWatchEventPayload } from '../../../protocol/src/fs';
import type { ProcessSignalName } from '../../../protocol/src/process';
import { invalid, notFound } from '../errors';
import { toStatus } from '../grpc/edge';
import type { ProcessService, ProcessStreamEvent } from '../processes/ProcessService';
import { fromWorkspace } from './paths';
import { EventQueue } from './queue';
import type { SandboxRun } from './sandboxRun';
import type { SandboxEnvs } from './sandboxes';

/** Opens the sandbox a request names and proves access to (see SandboxRun.open). */
export type OpenSandbox = (headers: Headers) => Promise<SandboxRun>;

const KEEPALIVE_MS_MAX = 60_000;
/** Events a polled watcher keeps between two GetWatcherEvents; the oldest go past it. */
const MAX_POLLED_EVENTS = 10_000;
const MAX_POLLED_WATCHERS_PER_RUN = 16;

/** Any failure as the Connect error of the same code (Connect's codes are gRPC's). */
export function connectError(err: unknown): ConnectError {
  if (err instanceof ConnectError) return err;
  const st = toStatus(err);
  return new ConnectError(st.message, st.code as number as Code);
}

/** Runs a handler with its failures turned into Connect errors. */
async function answer<T>(fn: () => Promise<T>): Promise<T> {
  try {
    return await fn();
  } catch (err) {
    throw connectError(err);
  }
}

/** Go's fs.FileMode string, which the daemon reports as `permissions`. */
function permissions(e: FsEntry): string {
  const kind = e.type === 'dir' ? 'd' : e.type === 'symlink' ? 'L' : '-';
  const bits = 'rwxrwxrwx';
  let s = kind;
  for (let i = 0; i < 9; i++) s += e.mode & (1 << (8 - i)) ? bits[i] : '-';
  return s;
}

function entryOf(e: FsEntry, workspacePath: string) {
  return create(fsPb.EntryInfoSchema, {
    name: e.name,
    type:
      e.type === 'dir' ? fsPb.FileType.DIRECTORY : e.type === 'symlink' ? fsPb.FileType.SYMLINK : fsPb.FileType.FILE,
    path: fromWorkspace(e.path, workspacePath),
    size: BigInt(e.size),
    mode: e.mode & 0o777,
    permissions: permissions(e),
    owner: e.owner,
    group: e.group,
    modifiedTime: timestampFromMs(Math.round(e.mtimeMs)),
    isSymlink: e.type === 'symlink',
    ...(e.symlinkTarget !== undefined ? { symlinkTarget: e.symlinkTarget } : {}),
  });
}

const EVENT_TYPES = {
  create: fsPb.EventType.CREATE,
  write: fsPb.EventType.WRITE,
  remove: fsPb.EventType.REMOVE,
  rename: fsPb.EventType.RENAME,
  chmod: fsPb.EventType.CHMOD,
} as const;

async function fsEvents(sandbox: SandboxRun, dir: string, batch: FsWatchEventPayload, includeEntry: boolean) {
  const out = [];
  for (const c of batch.changes) {
    let entry;
    if (includeEntry && (c.type === 'create' || c.type === 'write')) {
      const base = dir === '.' ? c.name : `${dir}/${c.name}`;
      entry = await sandbox
        .stat(base)
        .then((e) => entryOf(e, sandbox.workspacePath))
        .catch(() => undefined);
    }
    out.push(
      create(fsPb.FilesystemEventSchema, { name: c.name, type: EVENT_TYPES[c.type], ...(entry ? { entry } : {}) }),
    );
  }
  return out;
}

function keepaliveMs(ctx: HandlerContext): number {
  const asked = Number(ctx.requestHeader.get('keepalive-ping-interval'));
  return Number.isFinite(asked) && asked > 0 ? Math.min(asked * 1000, KEEPALIVE_MS_MAX) : 30_000;
}

/** A polled watcher (CreateWatcher / GetWatcherEvents): its events wait here, bounded. */
interface PolledWatcher {
  runId: string;
  events: fsPb.FilesystemEvent[];
  stop: () => Promise<void>;
  /** Why it ended (its runner gone: the run deleted, paused or failed; its directory removed). */
  ended: () => string | undefined;
}

/**
 * The E2B daemon's Connect services (filesystem.Filesystem, process.Process) onto the runner's
 * fs and process families of the sandbox each request names.
 */
export function envdRoutes(open: OpenSandbox, processes: ProcessService, envs: SandboxEnvs) {
  const watchers = new Map<string, PolledWatcher>();
  let nextWatcher = 0;

  const pidOf = async (sandbox: SandboxRun, sel: procPb.ProcessSelector | undefined): Promise<number> => {
    if (sel?.selector.case === 'pid') return sel.selector.value;
    if (sel?.selector.case === 'tag') {
      const tag = sel.selector.value;
      const found = (await processes.list(sandbox.tenant, sandbox.runId)).find((p) => p.tag === tag);
      if (!found) throw notFound(`no running process tagged ${tag}`);
      return found.pid;
    }
    throw invalid('a process selector needs a pid or a tag');
  };

  /** Streams a process's events as the daemon's, with keepalives while it is quiet. */
  async function* processEvents(
    ctx: HandlerContext,
    follow: (deliver: (e: ProcessStreamEvent) => void, signal: AbortSignal) => Promise<unknown>,
  ) {
    const queue = new EventQueue<ProcessStreamEvent | 'keepalive'>();
    const stop = new AbortController();
    ctx.signal.addEventListener('abort', () => {
      stop.abort();
      queue.close();
    });
    const timer = setInterval(() => queue.push('keepalive'), keepaliveMs(ctx));
    try {
      await answer(() =>
        follow((e) => {
          queue.push(e);
          if (e.type === 'end') queue.close();
        }, stop.signal),
      );
      for await (const e of queue) {
        if (e === 'keepalive') {
          yield create(procPb.ProcessEventSchema, { event: { case: 'keepalive', value: {} } });
        } else if (e.type === 'started') {
          yield create(procPb.ProcessEventSchema, { event: { case: 'start', value: { pid: e.pid } } });
        } else if (e.type === 'output') {
          yield create(procPb.ProcessEventSchema, {
            event: { case: 'data', value: { output: { case: e.stream, value: new Uint8Array(e.data) } } },
          });
        } else {
          const { exitCode, signal, error } = e.end;
          yield create(procPb.ProcessEventSchema, {
            event: {
              case: 'end',
              value: {
                exitCode,
                exited: !signal && exitCode >= 0,
                status: signal ? `signal: ${signal}` : `exit status ${exitCode}`,
                ...(error ? { error } : {}),
              },
            },
          });
        }
      }
    } finally {
      clearInterval(timer);
      stop.abort();
    }
  }

  return (router: ConnectRouter) => {
    router.service(fsPb.Filesystem, {
      stat: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          return { entry: entryOf(await s.stat(req.path), s.workspacePath) };
        }),
      makeDir: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const { entry, created } = await s.mkdir(req.path);
          if (!created) throw new ConnectError(`directory ${req.path} already exists`, Code.AlreadyExists);
          return { entry: entryOf(entry, s.workspacePath) };
        }),
      move: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          return { entry: entryOf(await s.move(req.source, req.destination), s.workspacePath) };
        }),
      listDir: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const entries = await s.list(req.path, Math.max(1, req.depth || 1));
          return { entries: entries.map((e) => entryOf(e, s.workspacePath)) };
        }),
      remove: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          await s.remove(req.path);
          return {};
        }),
      async *watchDir(req, ctx) {
        const s = await answer(() => open(ctx.requestHeader));
        const dir = await answer(async () => s.path(req.path));
        const queue = new EventQueue<FsWatchEventPayload | 'keepalive'>();
        const stop = await answer(() => s.watch(req.path, req.recursive, (e) => queue.push(e)));
        ctx.signal.addEventListener('abort', () => queue.close());
        const timer = setInterval(() => queue.push('keepalive'), keepaliveMs(ctx));
        try {
          yield create(fsPb.WatchDirResponseSchema, { event: { case: 'start', value: {} } });
          for await (const e of queue) {
            if (e === 'keepalive') {
              yield create(fsPb.WatchDirResponseSchema, { event: { case: 'keepalive', value: {} } });
              continue;
            }
            for (const ev of await fsEvents(s, dir, e, req.includeEntry))
              yield create(fsPb.WatchDirResponseSchema, { event: { case: 'filesystem', value: ev } });
            if (e.ended) throw new ConnectError(`the watch ended: ${e.ended}`, Code.NotFound);
          }
        } finally {
          clearInterval(timer);
          await stop();
        }
      },
      createWatcher: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          // A watcher outlives nothing: those whose runner has gone are let go here, so a
          // deleted or paused run's watchers hold neither memory nor a place under the cap.
          for (const [id, w] of watchers) if (w.ended()) watchers.delete(id);
          const ofRun = [...watchers.values()].filter((w) => w.runId === s.runId).length;
          if (ofRun >= MAX_POLLED_WATCHERS_PER_RUN)
            throw new ConnectError(
              `at most ${MAX_POLLED_WATCHERS_PER_RUN} polled watchers per sandbox`,
              Code.ResourceExhausted,
            );
          const dir = s.path(req.path);
          const id = `w${++nextWatcher}`;
          const events: fsPb.FilesystemEvent[] = [];
          const runner = s.runner;
          let endedBy: string | undefined;
          const stop = await s.watch(req.path, req.recursive, (e) => {
            if (e.ended) endedBy = e.ended;
            void fsEvents(s, dir, e, req.includeEntry).then((evs) => {
              events.push(...evs);
              if (events.length > MAX_POLLED_EVENTS) events.splice(0, events.length - MAX_POLLED_EVENTS);
            });
          });
          const ended = () => endedBy ?? runner.failure?.message;
          watchers.set(id, { runId: s.runId, events, stop, ended });
          return { watcherId: id };
        }),
      getWatcherEvents: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const w = watchers.get(req.watcherId);
          if (!w || w.runId !== s.runId) throw notFound(`watcher ${req.watcherId} not found`);
          const ended = w.ended();
          // Events that came before the end are still given; the next poll says it ended.
          if (ended && w.events.length === 0) {
            watchers.delete(req.watcherId);
            throw notFound(`watcher ${req.watcherId} ended: ${ended}`);
          }
          return { events: w.events.splice(0) };
        }),
      removeWatcher: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const w = watchers.get(req.watcherId);
          if (!w || w.runId !== s.runId) throw notFound(`watcher ${req.watcherId} not found`);
          watchers.delete(req.watcherId);
          await w.stop();
          return {};
        }),
    });

    router.service(procPb.Process, {
      list: (_req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const list = await processes.list(s.tenant, s.runId);
          return {
            processes: list.map((p) => ({
              pid: p.pid,
              config: { cmd: p.cmd, args: p.args, envs: p.env, cwd: fromWorkspace(p.cwd, s.workspacePath) },
              ...(p.tag ? { tag: p.tag } : {}),
            })),
          };
        }),
      async *start(req, ctx) {
        const s = await answer(() => open(ctx.requestHeader));
        const cfg = req.process;
        if (!cfg?.cmd) throw new ConnectError('process.cmd must not be empty', Code.InvalidArgument);
        const size = req.pty?.size;
        const params = {
          cmd: cfg.cmd,
          args: cfg.args,
          cwd: await answer(async () => (cfg.cwd ? s.path(cfg.cwd, 'cwd') : '.')),
          env: { ...envs.of(s.runId), ...cfg.envs },
          ...(size ? { pty: { cols: size.cols, rows: size.rows } } : {}),
          stdin: !!size || req.stdin === true,
          ...(req.tag ? { tag: req.tag } : {}),
        };
        for await (const e of processEvents(ctx, (deliver, signal) =>
          processes.start(s.tenant, s.runId, params, deliver, signal),
        ))
          yield { event: e };
      },
      async *connect(req, ctx) {
        const s = await answer(() => open(ctx.requestHeader));
        const pid = await answer(() => pidOf(s, req.process));
        for await (const e of processEvents(ctx, (deliver, signal) =>
          processes.connect(s.tenant, s.runId, pid, deliver, signal),
        ))
          yield { event: e };
      },
      update: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const size = req.pty?.size;
          if (size) await processes.resize(s.tenant, s.runId, await pidOf(s, req.process), size);
          return {};
        }),
      streamInput: (reqs, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          let pid: number | undefined;
          for await (const r of reqs) {
            if (r.event.case === 'start') pid = await pidOf(s, r.event.value.process);
            else if (r.event.case === 'data') {
              if (pid === undefined) throw invalid('stream input must start with the process to feed');
              const input = r.event.value.input?.input;
              if (input?.value) await processes.input(s.tenant, s.runId, pid, input.value);
            }
          }
          return {};
        }),
      sendInput: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const input = req.input?.input;
          if (input?.value) await processes.input(s.tenant, s.runId, await pidOf(s, req.process), input.value);
          return {};
        }),
      sendSignal: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          const sig: ProcessSignalName | undefined =
            req.signal === procPb.Signal.SIGKILL
              ? 'SIGKILL'
              : req.signal === procPb.Signal.SIGTERM
                ? 'SIGTERM'
                : undefined;
          if (!sig) throw invalid('signal must be SIGTERM or SIGKILL');
          await processes.signal(s.tenant, s.runId, await pidOf(s, req.process), sig);
          return {};
        }),
      closeStdin: (req, ctx) =>
        answer(async () => {
          const s = await open(ctx.requestHeader);
          await processes.closeInput(s.tenant, s.runId, await pidOf(s, req.process));
          return {};
        }),
    });
  };
}
