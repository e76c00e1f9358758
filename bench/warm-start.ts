/**
 * Runs from a warmed template against cold ones, on a real TypeScript project (@grpc/grpc-js's
 * own sources, 68 files; the template of test/fixtures/templates/warm):
 *  - warm: CreateRun of the template, whose snapshot is made → the first `lsp hover`;
 *  - cold: CreateRun of the same template on a gateway that keeps no snapshots, the project put
 *    in by PutFiles → the first `lsp hover` (the server's whole start and project load);
 *  - the server run directly, outside tether: typescript-language-server in a plain `docker run`
 *    of the same image on the same project, over stdio: spawn → initialize → didOpen → first
 *    hover (cold), then the same hover again (warm).
 * Under runc (the snapshot at portable depth) and runsc (memory depth) where the engine takes
 * checkpoints of runsc containers. Each figure is a spread over `repeats`.
 * Usage: node dist/bench/warm-start.js [repeats=5]
 */
import { spawn } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import { pathToFileURL } from 'node:url';
import { RunStart, RunState } from '@tether/contract';
import { resultText, type TetherClient } from '@tether/client';
import { createMessageConnection, StreamMessageReader, StreamMessageWriter } from 'vscode-jsonrpc/node';
import Docker from 'dockerode';
import { defaultConfig } from '../gateway/src/config';
import { checkpointSupport } from '../gateway/src/sandbox/dockerCheckpoints';
import { startTestGateway, type TestGateway } from '../test/helpers/gateway';
import { buildWarmTemplate } from '../test/integration/templates/warmTemplate';
import { machineBusyMs, summary, writeResult } from './lib';

const REPEATS = Number(process.argv[2] ?? 5);
const TEMPLATE = 'warm';
const features = { lsp: true, eval: true };
const HOVER = { action: 'hover', file: 'src/client.ts', line: 38, symbol: 'Metadata' };
const REPO = path.resolve(__dirname, '../..');

/** The project as PutFiles sends it, for the cold runs: what the template's warm-up copies in. */
function projectFiles(): Record<string, string> {
  const grpc = path.join(REPO, 'node_modules/@grpc/grpc-js');
  const out: Record<string, string> = {
    'package.json': readFileSync(path.join(grpc, 'package.json'), 'utf8'),
    'tsconfig.json': readFileSync(path.join(REPO, 'test/fixtures/templates/warm/tsconfig.json'), 'utf8'),
  };
  const walk = (dir: string, rel: string) => {
    for (const e of readdirSync(dir)) {
      const abs = path.join(dir, e);
      if (statSync(abs).isDirectory()) walk(abs, `${rel}/${e}`);
      else out[`${rel}/${e}`] = readFileSync(abs, 'utf8');
    }
  };
  walk(path.join(grpc, 'src'), 'src');
  return out;
}

async function hover(c: TetherClient, runId: string): Promise<void> {
  const r = await c.callTool(runId, 'lsp', HOVER, { deadlineMs: 300_000 });
  const text = resultText(r.result);
  if (r.result.isError || !/class Metadata/.test(text)) throw new Error(`hover did not answer: ${text.slice(0, 400)}`);
}

async function gateway(runtime: string, maxSnapshots: number): Promise<TestGateway> {
  return startTestGateway({
    provider: 'docker',
    docker: { ...defaultConfig().docker, image: process.env.TETHER_IMAGE ?? '', runtime },
    templates: { allowed: { alice: [TEMPLATE] }, maxSnapshots },
    runs: { ...defaultConfig().runs, idlePauseSeconds: 0 },
  });
}

async function warmRuns(runtime: string) {
  const t = await gateway(runtime, 8);
  const create: number[] = [];
  const total: number[] = [];
  const cpu: number[] = [];
  let note = '';
  try {
    // The snapshot is made on the template's first use; until then runs start cold.
    for (const until = Date.now() + 600_000; ; ) {
      const run = await t.alice.createRun({ template: TEMPLATE, features });
      await t.alice.deleteRun(run.runId);
      if (run.start === RunStart.TEMPLATE) break;
      if (Date.now() > until) throw new Error(`no snapshot: ${run.startNote}`);
      await new Promise((r) => setTimeout(r, 2000));
    }
    for (let i = 0; i < REPEATS; i++) {
      const busy0 = machineBusyMs();
      const t0 = performance.now();
      const run = await t.alice.createRun({ template: TEMPLATE, features });
      const t1 = performance.now();
      if (run.state !== RunState.READY || run.start !== RunStart.TEMPLATE) throw new Error(run.startNote || run.error);
      await hover(t.alice, run.runId);
      total.push(performance.now() - t0);
      create.push(t1 - t0);
      cpu.push(machineBusyMs() - busy0);
      note = run.startNote;
      await t.alice.deleteRun(run.runId);
    }
  } finally {
    await t.close();
  }
  return {
    createToFirstHoverMs: summary(total),
    createRunMs: summary(create),
    machineCpuMs: summary(cpu),
    startNote: note,
  };
}

async function coldRuns(runtime: string) {
  const t = await gateway(runtime, 0);
  const files = projectFiles();
  const total: number[] = [];
  const hoverOnly: number[] = [];
  try {
    for (let i = 0; i < REPEATS; i++) {
      const t0 = performance.now();
      const run = await t.alice.createRun({ template: TEMPLATE, features });
      if (run.state !== RunState.READY) throw new Error(run.error);
      await t.alice.putFileMap(run.runId, files);
      const t1 = performance.now();
      await hover(t.alice, run.runId);
      total.push(performance.now() - t0);
      hoverOnly.push(performance.now() - t1);
      await t.alice.deleteRun(run.runId);
    }
  } finally {
    await t.close();
  }
  return { createPutFilesToFirstHoverMs: summary(total), firstHoverMs: summary(hoverOnly) };
}

/** typescript-language-server in a plain container of the image, on the project the image holds. */
async function directServer(image: string, runtime: string) {
  const cold: number[] = [];
  const warm: number[] = [];
  const root = '/opt/warm-project';
  const file = `${root}/src/client.ts`;
  const text = readFileSync(path.join(REPO, 'node_modules/@grpc/grpc-js/src/client.ts'), 'utf8');
  const line = 37; // 0-based: line 38, `import { Metadata } from './metadata';`
  const character = text.split('\n')[line].indexOf('Metadata');
  for (let i = 0; i < REPEATS; i++) {
    const t0 = performance.now();
    const child = spawn(
      'docker',
      [
        'run',
        '--rm',
        '-i',
        '--network',
        'none',
        '--log-driver',
        'none',
        '--runtime',
        runtime,
        '--label',
        'dev.tether.bench=true',
        '-w',
        root,
        '--entrypoint',
        'typescript-language-server',
        image,
        '--stdio',
      ],
      { stdio: ['pipe', 'pipe', 'ignore'] },
    );
    const c = createMessageConnection(new StreamMessageReader(child.stdout), new StreamMessageWriter(child.stdin));
    c.onRequest(() => null);
    c.onNotification(() => undefined);
    c.listen();
    try {
      await c.sendRequest('initialize', {
        processId: null,
        rootUri: pathToFileURL(root).href,
        capabilities: {},
        workspaceFolders: [{ uri: pathToFileURL(root).href, name: 'project' }],
      });
      c.sendNotification('initialized', {});
      const uri = pathToFileURL(file).href;
      c.sendNotification('textDocument/didOpen', { textDocument: { uri, languageId: 'typescript', version: 1, text } });
      // Until the answer is the project's (while tsserver loads the project, its syntax server
      // answers with the import alone), as the lsp tool waits for it.
      const ask = async () => {
        for (;;) {
          const r = (await c.sendRequest('textDocument/hover', {
            textDocument: { uri },
            position: { line, character },
          })) as { contents?: unknown } | null;
          if (JSON.stringify(r?.contents ?? '').includes('class Metadata')) return;
          await new Promise((r) => setTimeout(r, 50));
        }
      };
      await ask();
      cold.push(performance.now() - t0);
      const t1 = performance.now();
      await ask();
      warm.push(performance.now() - t1);
    } finally {
      c.dispose();
      child.kill();
    }
  }
  return { spawnToFirstHoverMs: summary(cold), secondHoverMs: summary(warm) };
}

async function main() {
  const built = await buildWarmTemplate(TEMPLATE);
  const runtimes = ['runc'];
  const docker = new Docker();
  const support = await checkpointSupport(docker, 'runsc');
  if (support.ok) runtimes.push('runsc');
  const results: Record<string, unknown> = {};
  for (const runtime of runtimes) {
    console.error(`==> ${runtime}: warm runs`);
    const warm = await warmRuns(runtime);
    console.error(`==> ${runtime}: cold runs`);
    const cold = await coldRuns(runtime);
    console.error(`==> ${runtime}: the server directly`);
    const direct = await directServer(built.tag, runtime);
    results[runtime] = { warm, cold, direct };
    console.error(JSON.stringify(results[runtime]));
  }
  writeResult('warm-start', {
    description: `CreateRun of a template with a warm-up → first lsp hover on @grpc/grpc-js's sources (src/client.ts:38 Metadata), ${REPEATS} each; against a cold run of the same template (CreateRun + PutFiles of the project → first hover) and typescript-language-server in a plain docker run of the same image (spawn → first hover, then a second hover)`,
    template: built.tag,
    ...(support.ok ? {} : { runscSkipped: support.why }),
    results,
  });
}

main().catch((err) => {
  console.error(err);
  process.exit(1);
});
