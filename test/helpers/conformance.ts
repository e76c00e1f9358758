import { readFileSync } from 'node:fs';
import * as path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import { enumToJson, fromJson, type JsonValue } from '@bufbuild/protobuf';
import {
  AnswerSchema,
  CreateRunRequestSchema,
  QuestionKindSchema,
  RunStateSchema,
  SurfaceSchema,
  TetherClient,
  TetherError,
  ToolResultSchema,
  untar,
  type BridgeCall,
  type CallOptions,
  type CallOutcome,
  type Question,
  type Run,
} from '@tether/client';

// The TypeScript runner of clients/conformance/scenarios.json (the step language is described in
// clients/conformance/README.md). It drives the @tether/client package exactly as a user would.

type Json = JsonValue;
type Obj = { [k: string]: Json };

export interface Scenario {
  name: string;
  steps: Step[];
}

interface Step extends Obj {
  op: string;
}

export interface ConformanceEnv {
  address: string;
  tokenA: string;
  tokenB: string;
  /** Calls on the client's shared Calls stream (default), or a CallTool stream each. */
  multiplex?: boolean;
}

export const DEFAULT_FILE = path.resolve(__dirname, '../../../clients/conformance/scenarios.json');

/** The scenarios of the suite file (TETHER_CONFORMANCE_FILE, or the repository's). */
export function loadScenarios(file = process.env.TETHER_CONFORMANCE_FILE || DEFAULT_FILE): Scenario[] {
  const doc = JSON.parse(readFileSync(file, 'utf8')) as { version: number; scenarios: Scenario[] };
  if (doc.version !== 1) throw new Error(`${file}: suite version ${doc.version}; this runner knows version 1`);
  const only = process.env.TETHER_CONFORMANCE_ONLY;
  return only ? doc.scenarios.filter((s) => s.name.includes(only)) : doc.scenarios;
}

export function envFromProcess(): ConformanceEnv {
  const { TETHER_ADDRESS: address, TETHER_TOKEN_A: tokenA, TETHER_TOKEN_B: tokenB } = process.env;
  if (!address || !tokenA || !tokenB) throw new Error('set TETHER_ADDRESS, TETHER_TOKEN_A and TETHER_TOKEN_B');
  return { address, tokenA, tokenB, multiplex: process.env.TETHER_CONFORMANCE_MULTIPLEX !== '0' };
}

class StepFailure extends Error {}

function fail(message: string): never {
  throw new StepFailure(message);
}

const show = (v: unknown) => JSON.stringify(v);

/** Replaces every string that is exactly `$name` with the bound value. */
function substitute(v: Json, vars: Map<string, string>): Json {
  if (typeof v === 'string' && /^\$\w+$/.test(v)) {
    const bound = vars.get(v.slice(1));
    if (bound === undefined) fail(`${v} is not bound`);
    return bound;
  }
  if (Array.isArray(v)) return v.map((x) => substitute(x, vars));
  if (v && typeof v === 'object')
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substitute(x, vars)]));
  return v;
}

const str = (step: Obj, key: string, fallback?: string): string => {
  const v = step[key] ?? fallback;
  if (typeof v !== 'string') fail(`"${key}" must be a string`);
  return v;
};

function checkQuestion(q: Question, want: Obj, i: number): void {
  const at = `question card ${i + 1}`;
  if (want.kind !== undefined && enumToJson(QuestionKindSchema, q.kind) !== want.kind)
    fail(`${at}: kind ${enumToJson(QuestionKindSchema, q.kind)}, expected ${want.kind}`);
  if (want.questionContains !== undefined && !q.question.includes(String(want.questionContains)))
    fail(`${at}: ${show(q.question)} does not contain ${show(want.questionContains)}`);
  if (want.targetSpace !== undefined && q.targetSpace !== want.targetSpace)
    fail(`${at}: target space ${show(q.targetSpace)}, expected ${show(want.targetSpace)}`);
  if (
    want.options !== undefined &&
    !isDeepStrictEqual(
      q.options.map((o) => o.label),
      want.options,
    )
  )
    fail(`${at}: options ${show(q.options.map((o) => o.label))}, expected ${show(want.options)}`);
  if (want.rejectedReason !== undefined && q.rejectedReason !== want.rejectedReason)
    fail(`${at}: rejected reason ${show(q.rejectedReason)}, expected ${show(want.rejectedReason)}`);
  if (want.rejectedReasonContains !== undefined && !q.rejectedReason.includes(String(want.rejectedReasonContains)))
    fail(`${at}: rejected reason ${show(q.rejectedReason)} does not contain ${show(want.rejectedReasonContains)}`);
}

function checkBridgeCall(b: BridgeCall, want: Obj, i: number): void {
  const at = `bridged call ${i + 1}`;
  if (want.tool !== undefined && b.tool !== want.tool) fail(`${at}: tool ${show(b.tool)}, expected ${show(want.tool)}`);
  if (want.arguments !== undefined && !isDeepStrictEqual(JSON.parse(b.argumentsJson || 'null'), want.arguments))
    fail(`${at}: arguments ${b.argumentsJson}, expected ${show(want.arguments)}`);
}

function checkList<T>(what: string, got: T[], want: Json | undefined, check: (x: T, w: Obj, i: number) => void): void {
  if (want === undefined) return;
  const list = want as Obj[];
  if (got.length !== list.length) fail(`${got.length} ${what}, expected ${list.length}`);
  list.forEach((w, i) => check(got[i], w, i));
}

function checkCall(out: CallOutcome, expect: Obj): void {
  if (expect.isError !== undefined && out.isError !== expect.isError)
    fail(`isError is ${out.isError}, expected ${expect.isError}; the text: ${show(out.text)}`);
  if (expect.textEquals !== undefined && out.text !== expect.textEquals)
    fail(`text ${show(out.text)}, expected ${show(expect.textEquals)}`);
  for (const t of (expect.textContains as string[] | undefined) ?? [])
    if (!out.text.includes(t)) fail(`text does not contain ${show(t)}: ${show(out.text)}`);
  if (expect.structured !== undefined && !isDeepStrictEqual(out.structured, expect.structured))
    fail(`structured ${out.result.structuredJson}, expected ${show(expect.structured)}`);
  checkList('question cards', out.questions, expect.questions, checkQuestion);
  checkList('bridged calls', out.bridgeCalls, expect.bridgeCalls, checkBridgeCall);
}

function checkRun(run: Run, expect: Obj): void {
  const state = enumToJson(RunStateSchema, run.state);
  if (expect.state !== undefined && state !== expect.state)
    fail(`run state ${state}, expected ${expect.state}${run.error ? ` (${run.error})` : ''}`);
  if (expect.errorContains !== undefined && !run.error.includes(String(expect.errorContains)))
    fail(`run error ${show(run.error)} does not contain ${show(expect.errorContains)}`);
}

function checkMembers(what: string, got: string[], expect: Obj): void {
  for (const x of (expect.includes as string[] | undefined) ?? [])
    if (!got.includes(x)) fail(`${what} ${show(got)} do not include ${x}`);
  for (const x of (expect.excludes as string[] | undefined) ?? [])
    if (got.includes(x)) fail(`${what} ${show(got)} include ${x}`);
}

/** One scenario's execution: the identity, the variables, and the runs to clean up. */
class ScenarioRun {
  private token: string;
  private readonly clients = new Map<string, TetherClient>();
  private readonly vars = new Map<string, string>();
  private readonly created: { runId: string; token: string }[] = [];

  constructor(private readonly env: ConformanceEnv) {
    this.token = env.tokenA;
  }

  private client(token = this.token): TetherClient {
    let c = this.clients.get(token);
    if (!c)
      this.clients.set(
        token,
        (c = new TetherClient(this.env.address, token, { multiplex: this.env.multiplex !== false })),
      );
    return c;
  }

  async step(raw: Step): Promise<void> {
    const step = substitute(raw, this.vars) as Step;
    const expect = (step.expect ?? {}) as Obj;
    const wanted = (expect.status as string | undefined) ?? 'OK';
    let check: () => void = () => undefined;
    try {
      check = await this.perform(step, expect);
    } catch (err) {
      if (err instanceof StepFailure || !(err instanceof TetherError)) throw err;
      if (wanted === 'OK') fail(`failed with ${err.codeName}: ${err.details}`);
      if (err.codeName !== wanted) fail(`failed with ${err.codeName} (${err.details}), expected ${wanted}`);
      if (expect.detailsContains !== undefined && !err.details.includes(String(expect.detailsContains)))
        fail(`status message ${show(err.details)} does not contain ${show(expect.detailsContains)}`);
      return;
    }
    if (wanted !== 'OK') fail(`succeeded, expected ${wanted}`);
    check();
  }

  /** Runs the step's request; returns the checks of its successful outcome. */
  private async perform(step: Step, expect: Obj): Promise<() => void> {
    const c = this.client();
    switch (step.op) {
      case 'useToken':
        if (step.literal !== undefined) this.token = str(step, 'literal');
        else if (step.token === 'A' || step.token === 'B')
          this.token = step.token === 'A' ? this.env.tokenA : this.env.tokenB;
        else fail(`useToken needs "token": "A" or "B", or "literal"`);
        return () => undefined;
      case 'createRun': {
        const run = await c.createRun(fromJson(CreateRunRequestSchema, (step.request ?? {}) as Json));
        if (step.as !== undefined) {
          this.vars.set(str(step, 'as'), run.runId);
          this.created.push({ runId: run.runId, token: this.token });
        }
        return () => checkRun(run, expect);
      }
      case 'getRun':
      case 'pauseRun':
      case 'resumeRun': {
        const id = str(step, 'run');
        const run = await (step.op === 'getRun'
          ? c.getRun(id)
          : step.op === 'pauseRun'
            ? c.pauseRun(id)
            : c.resumeRun(id));
        return () => checkRun(run, expect);
      }
      case 'listRuns': {
        const ids = (await c.listRuns()).map((r) => r.runId);
        return () => checkMembers('runs', ids, expect);
      }
      case 'deleteRun':
        await c.deleteRun(str(step, 'run'));
        return () => undefined;
      case 'forkRun':
        await c.forkRun(str(step, 'run'), (step.count as number | undefined) ?? 1);
        return () => undefined;
      case 'listTools': {
        const surface = step.surface === undefined ? undefined : fromJson(SurfaceSchema, step.surface);
        const names = (await c.listTools(str(step, 'run'), surface)).map((t) => t.name);
        return () => checkMembers('tools', names, expect);
      }
      case 'putFiles': {
        const res = await c.putFiles(
          str(step, 'run'),
          (step.files ?? {}) as Record<string, string>,
          str(step, 'path', ''),
        );
        return () => {
          if (expect.filesWritten !== undefined && res.filesWritten !== expect.filesWritten)
            fail(`${res.filesWritten} files written, expected ${expect.filesWritten}`);
        };
      }
      case 'getFiles': {
        const files = await untar(await c.getFiles(str(step, 'run'), str(step, 'path', '')));
        return () => {
          for (const [name, content] of Object.entries((expect.files ?? {}) as Record<string, string>)) {
            const got = files.get(name);
            if (got === undefined) fail(`${name} is not in the archive (it has ${show([...files.keys()])})`);
            if (got.toString('utf8') !== content)
              fail(`${name} holds ${show(got.toString('utf8'))}, expected ${show(content)}`);
          }
          for (const name of (expect.absent as string[] | undefined) ?? [])
            if (files.has(name)) fail(`${name} is in the archive`);
        };
      }
      case 'callTool':
        return this.callTool(c, step, expect);
      default:
        fail(`unknown op ${show(step.op)}`);
    }
  }

  private async callTool(c: TetherClient, step: Step, expect: Obj): Promise<() => void> {
    const abort = new AbortController();
    let scriptError: string | undefined;
    const answers = step.answers as Obj[] | undefined;
    const bridge = step.bridge as Obj[] | undefined;
    let asked = 0;
    let bridged = 0;
    const opts: CallOptions = { signal: abort.signal, deadlineMs: (step.deadlineMs as number | undefined) ?? 60_000 };
    if (step.surface !== undefined) opts.surface = fromJson(SurfaceSchema, step.surface);
    if (answers) {
      opts.onQuestion = (q) => {
        const entry = answers[asked++];
        if (!entry || 'cancel' in entry) {
          if (!entry) scriptError = `an unexpected question card ${asked}: ${show(q.question)}`;
          abort.abort(entry ? String(entry.cancel) : 'unexpected question');
          return new Promise(() => undefined);
        }
        return fromJson(AnswerSchema, entry);
      };
    }
    if (bridge) {
      opts.onBridgeCall = (b) => {
        const entry = bridge[bridged++];
        if (!entry) {
          scriptError = `an unexpected bridged call ${bridged}: ${b.tool}`;
          abort.abort('unexpected bridged call');
          return 'unexpected';
        }
        return fromJson(ToolResultSchema, entry.result ?? {});
      };
    }
    const timer =
      step.cancelAfterMs === undefined
        ? undefined
        : setTimeout(
            () => abort.abort((step.cancelReason as string | undefined) ?? 'cancelled'),
            step.cancelAfterMs as number,
          );
    try {
      const args = step.argumentsJson !== undefined ? str(step, 'argumentsJson') : JSON.stringify(step.arguments ?? {});
      const out = await c.callTool(str(step, 'run'), str(step, 'tool'), args, opts);
      return () => {
        if (scriptError) fail(scriptError);
        checkCall(out, expect);
      };
    } finally {
      clearTimeout(timer);
    }
  }

  /** Deletes what the scenario created and left behind, and hangs up. */
  async cleanUp(): Promise<void> {
    for (const { runId, token } of this.created)
      await this.client(token)
        .deleteRun(runId)
        .catch(() => undefined);
    for (const c of this.clients.values()) c.close();
  }
}

/** Runs one scenario; rejects naming the first failing step. */
export async function runScenario(s: Scenario, env: ConformanceEnv): Promise<void> {
  const run = new ScenarioRun(env);
  try {
    for (const [i, step] of s.steps.entries()) {
      try {
        await run.step(step);
      } catch (err) {
        throw new Error(`step ${i + 1} (${step.op}): ${(err as Error).message}`, { cause: err });
      }
    }
  } finally {
    await run.cleanUp();
  }
}

// As a command: `node dist/test/helpers/conformance.js` against the gateway in the environment.
if (require.main === module) {
  (async () => {
    const env = envFromProcess();
    let failed = 0;
    for (const s of loadScenarios()) {
      try {
        await runScenario(s, env);
        console.log(`pass  ${s.name}`);
      } catch (err) {
        failed++;
        console.log(`FAIL  ${s.name}: ${(err as Error).message}`);
      }
    }
    process.exitCode = failed ? 1 : 0;
  })();
}
