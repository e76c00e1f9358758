import { TETHER_VERSION } from '../../protocol/src/version';
import { readBoot } from './connections/boot';
import { QUIESCE_WAKE_SIGNAL } from '../../protocol/src/transport';
import { Listeners } from './connections/listeners';
import { Sessions } from './connections/sessions';
import { RunnerStdio } from './connections/stdio';
import { logger } from './log';
import { watchOomKills } from './oom/watcher';

// stdout carries protocol only: anything a library prints goes to stderr instead.
console.log =
  console.info =
  console.debug =
  console.warn =
    (...args: unknown[]) => logger.info({ console: args.map(String).join(' ') });

async function stop(code: number): Promise<never> {
  await sessions.context?.stop();
  process.exit(code);
}

const sessions = new Sessions(TETHER_VERSION, stop);

// A bug in one tool must not take the whole run down with it.
process.on('uncaughtException', (err) => logger.error({ err }, 'uncaught exception'));
process.on('unhandledRejection', (err) => logger.error({ err }, 'unhandled rejection'));
process.on('SIGTERM', () => void stop(0));

async function main(): Promise<void> {
  // The gateway's first line on stdin carries the run's secret and where to listen.
  const boot = await readBoot(process.stdin);
  // Exits at once, without stopping the tools: the runner is its container's main process, so
  // every other process in it ends with it, and no answer may leave after the run is declared dead.
  if (boot.oomExit) watchOomKills({ messagePath: boot.oomExit.messagePath, exit: (code) => process.exit(code) });
  // The runner's own stdio is the first connection and the fallback until a socket is used:
  // only whoever started the runner can write to it. When it closes, that gateway is gone.
  const stdio = new RunnerStdio(sessions, () => void stop(0));
  const listeners = new Listeners(boot.secret, sessions, () => stdio.retire());
  const hello = await listeners.listen(boot.listen);
  // A memory pause: every connection and listener closed before the checkpoint, opened again
  // when the gateway signals after the restore (docs/lifecycle.md, "Memory depth").
  sessions.quiesce = { closing: () => listeners.connections, close: () => listeners.quiesce() };
  process.on(
    QUIESCE_WAKE_SIGNAL,
    () => void listeners.reopen().catch((err: Error) => logger.error({ err: err.message }, 'listening again failed')),
  );
  process.stdout.write(`${JSON.stringify(hello)}\n`);
  stdio.serve();
  logger.info({ pid: process.pid, listening: hello.listening, errors: hello.errors }, 'runner listening');
}

main().catch((err: Error) => {
  logger.error({ err: err.message }, 'runner could not start');
  process.exit(2);
});
