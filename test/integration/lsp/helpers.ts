import { execFileSync } from 'node:child_process';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import * as path from 'node:path';
import assert from 'node:assert/strict';
import { Approval } from '@tether/contract';
import { resultText } from '../../../clients/typescript/src';
import { LABELS } from '../../../gateway/src/sandbox/provider';
import type { TestGateway } from '../../helpers/gateway';

export const FIXTURES = path.resolve(__dirname, '../../../../test/fixtures/lsp');

/** The files of a fixture project, keyed by their path under `prefix`. */
export function fixture(name: string, prefix = ''): Record<string, string> {
  return fixtureFiles(path.join(FIXTURES, name), prefix);
}

/** The files under a folder, keyed by their path under `prefix`. */
export function fixtureFiles(root: string, prefix = ''): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string) => {
    for (const e of readdirSync(dir)) {
      const abs = path.join(dir, e);
      if (statSync(abs).isDirectory()) walk(abs);
      else out[path.posix.join(prefix, path.relative(root, abs).split(path.sep).join('/'))] = readFileSync(abs, 'utf8');
    }
  };
  walk(root);
  return out;
}

export interface LspRun {
  runId: string;
  call(tool: string, args: Record<string, unknown>): Promise<{ text: string; isError: boolean }>;
  /** Calls and asserts success, returning the text. */
  ok(tool: string, args: Record<string, unknown>): Promise<string>;
  /** Calls and asserts an is_error result, returning the text. */
  fails(tool: string, args: Record<string, unknown>): Promise<string>;
}

export async function lspRun(t: TestGateway, files: Record<string, string>): Promise<LspRun> {
  const run = await t.alice.createRun({ features: { lsp: true }, approvals: { write: Approval.AUTO } });
  assert.equal(run.error, '');
  await t.alice.putFileMap(run.runId, files);
  const call = async (tool: string, args: Record<string, unknown>) => {
    const r = await t.alice.callTool(run.runId, tool, args, { deadlineMs: 120_000 });
    return { text: resultText(r.result), isError: r.result.isError };
  };
  return {
    runId: run.runId,
    call,
    async ok(tool, args) {
      const r = await call(tool, args);
      assert.equal(r.isError, false, `${tool} ${JSON.stringify(args)} failed: ${r.text}`);
      return r.text;
    },
    async fails(tool, args) {
      const r = await call(tool, args);
      assert.equal(r.isError, true, `${tool} ${JSON.stringify(args)} should fail, got: ${r.text}`);
      return r.text;
    },
  };
}

/** Kills a process of a run's sandbox: inside its container (docker) or on this host (process). */
export function killInRun(t: TestGateway, runId: string, pid: number): void {
  if (t.config.provider === 'docker') {
    const id = execFileSync('docker', ['ps', '-q', '--filter', `label=${LABELS.runId}=${runId}`], { encoding: 'utf8' })
      .trim()
      .split('\n')[0];
    assert.ok(id, `no container for run ${runId}`);
    execFileSync('docker', ['exec', id, 'sh', '-c', `kill -9 ${pid}`]);
  } else process.kill(pid, 'SIGKILL');
}

/** The pid `lsp status` shows for a server id. */
export function pidOf(status: string, serverId: string): number {
  const section = status.split('\n').findIndex((l) => l.startsWith(`${serverId} (`));
  const m = status
    .split('\n')
    .slice(section + 1)
    .find((l) => l.startsWith('  running for'))
    ?.match(/pid (\d+)/);
  assert.ok(m, `no running ${serverId} in status:\n${status}`);
  return Number(m[1]);
}
