import { Option, type Command } from 'commander';
import { AgentKind, RunStart, RunState, SurfaceMode, Tier, TetherClient, type ToolResult } from '@tether/client';

// The CLI's client-side commands: each is a plain user of @tether/client's public API, as any
// platform's code is, so the CLI exercises the package it ships and no gateway internals.

const addr = () => process.env.TETHER_ADDRESS ?? '127.0.0.1:50051';
const tok = () => process.env.TETHER_TOKEN ?? '';

function client(opts: { address: string; token: string }): TetherClient {
  if (!opts.token) {
    console.error('no token: pass --token or set TETHER_TOKEN');
    process.exit(2);
  }
  return new TetherClient(opts.address, opts.token);
}

const withConn = (c: Command) =>
  c
    .addOption(new Option('--address <host:port>', 'gateway address').default(addr()))
    .addOption(new Option('--token <token>', 'bearer token (or TETHER_TOKEN)').default(tok()));

const surfaceOf = (o: { plan?: boolean; readOnly?: boolean }) => ({
  mode: o.plan ? SurfaceMode.PLAN : SurfaceMode.DEFAULT,
  agent: o.readOnly ? AgentKind.READ_ONLY_SUBAGENT : AgentKind.MAIN,
});

const FEATURES_HELP = 'comma list of lsp,ast,debug,eval,questions,vibe,commands';

function featuresOf(list: string, targetSpace: string) {
  const f = new Set(list.split(',').map((s) => s.trim()));
  return {
    lsp: f.has('lsp'),
    ast: f.has('ast'),
    debug: f.has('debug'),
    eval: f.has('eval'),
    vibe: f.has('vibe'),
    commands: f.has('commands'),
    questions: { enabled: f.has('questions'), targetSpace },
  };
}

/** Registers `run create|list|delete|pause|resume|fork`, `tools`, `call` and `template warm`, which talk to a running gateway. */
export function registerClientCommands(program: Command, fail: (err: unknown) => never): void {
  const run = program.command('run').description('manage runs');
  withConn(run.command('create'))
    .description('create a run')
    .option('--conversation <id>', 'conversation id', 'cli')
    .option('--workspace <dir>', 'host directory to use as the workspace (must be under an allowed root)')
    .option('--features <list>', FEATURES_HELP, 'lsp,ast,debug,eval')
    .option('--target-space <name>', 'where question cards are shown', 'cli')
    .option('--template <name>', 'runner template (default: the base runner image)')
    .option('--egress [hosts]', "grant egress: a comma list of host:port, or nothing for the tenant's whole allow-list")
    .action(async (o) => {
      const c = client(o);
      try {
        const r = await c.createRun({
          conversationId: o.conversation,
          workspace: o.workspace ?? '',
          features: featuresOf(o.features, o.targetSpace),
          template: o.template ?? '',
          ...(o.egress !== undefined
            ? {
                egress: {
                  allow:
                    o.egress === true
                      ? []
                      : String(o.egress)
                          .split(',')
                          .map((s: string) => s.trim())
                          .filter(Boolean),
                },
              }
            : {}),
        });
        console.log(r.state === RunState.READY ? r.runId : `${r.runId} ${RunState[r.state]}: ${r.error}`);
        if (r.state !== RunState.READY) process.exitCode = 1;
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });
  withConn(run.command('list'))
    .description("list this tenant's runs")
    .action(async (o) => {
      const c = client(o);
      try {
        for (const r of await c.listRuns())
          console.log(`${r.runId}\t${RunState[r.state]}\t${r.conversationId}${r.error ? `\t${r.error}` : ''}`);
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });
  withConn(run.command('delete <runId>'))
    .description('delete a run')
    .action(async (runId: string, o) => {
      const c = client(o);
      try {
        await c.deleteRun(runId);
        console.log(`deleted ${runId}`);
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });

  for (const [verb, what] of [
    ['pause', 'pause a run: keep its data, let go of its sandbox'],
    ['resume', 'resume a paused run'],
  ] as const)
    withConn(run.command(`${verb} <runId>`))
      .description(what)
      .action(async (runId: string, o) => {
        const c = client(o);
        try {
          const r = verb === 'pause' ? await c.pauseRun(runId) : await c.resumeRun(runId);
          const lost = r.pause?.notKept.length ? ` (not kept: ${r.pause.notKept.join('; ')})` : '';
          console.log(`${r.runId} ${RunState[r.state]}${lost}`);
        } catch (err) {
          fail(err);
        } finally {
          c.close();
        }
      });

  withConn(run.command('fork <runId>'))
    .description("new runs from a run's state now (its workspace, kernel variables, staged edits)")
    .option('--count <n>', 'how many forks', '1')
    .action(async (runId: string, o) => {
      const c = client(o);
      try {
        for (const r of await c.forkRun(runId, Number(o.count)))
          console.log(r.state === RunState.READY ? r.runId : `${r.runId} ${RunState[r.state]}: ${r.error}`);
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });

  withConn(program.command('tools <runId>'))
    .description('list the tools a surface sees')
    .option('--plan', 'plan-mode surface (read tier only)')
    .option('--read-only', 'read-only subagent surface (read tier only)')
    .option('--json', 'print the schemas too')
    .action(async (runId: string, o) => {
      const c = client(o);
      try {
        for (const t of await c.listTools(runId, surfaceOf(o))) {
          console.log(
            `${t.name.padEnd(14)} ${Tier[t.tier].toLowerCase().padEnd(6)} ${t.parallelSafe ? 'parallel' : 'serial  '} ${t.description.split('\n')[0]}`,
          );
          if (o.json) console.log(`  ${t.inputSchemaJson}`);
        }
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });

  withConn(program.command('call <runId> <tool> [json]'))
    .description('call a tool with JSON arguments and print its result')
    .option('--plan', 'call from a plan-mode surface')
    .option('--read-only', 'call from a read-only subagent surface')
    .action(async (runId: string, tool: string, json: string | undefined, o) => {
      const c = client(o);
      try {
        const out = await c.callTool(runId, tool, json ?? '{}', {
          surface: surfaceOf(o),
          onProgress: (t) => process.stderr.write(t),
        });
        console.log(render(out.result));
        if (out.result.structuredJson && process.env.TETHER_SHOW_STRUCTURED) console.log(out.result.structuredJson);
        if (out.result.isError) process.exitCode = 1;
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });
}

/** A result as a terminal shows it: text as is, tables aligned, images named. */
function render(r: ToolResult): string {
  return r.content
    .map((c) => {
      switch (c.item.case) {
        case 'text':
        case 'json':
          return c.item.value;
        case 'image':
          return `[image ${c.item.value.mime}, ${c.item.value.data.length} bytes]`;
        case 'table': {
          const rows = [c.item.value.columns, ...c.item.value.rows.map((row) => row.cells)];
          const widths = c.item.value.columns.map((_, i) =>
            Math.min(40, Math.max(...rows.map((row) => (row[i] ?? '').length))),
          );
          const lines = rows.map((row) =>
            row
              .map((cell, i) => (cell ?? '').slice(0, 40).padEnd(widths[i]))
              .join('  ')
              .trimEnd(),
          );
          if (c.item.value.omittedRows) lines.push(`… ${c.item.value.omittedRows} more rows`);
          return lines.join('\n');
        }
        default:
          return '';
      }
    })
    .filter(Boolean)
    .join('\n');
}

/**
 * `template warm NAME`: has a running gateway make the snapshot of a template with a warm-up
 * (runs of it start cold until then) and reports it. The runs it creates meanwhile are removed.
 */
export function registerTemplateWarm(template: Command, fail: (err: unknown) => never): void {
  withConn(template.command('warm <name>'))
    .description(
      "have a running gateway make a template's snapshot (its warm-up, docs/templates.md) for runs of these features; prints the warm-up's time and the snapshot's size",
    )
    .option('--features <list>', FEATURES_HELP, 'lsp,ast,debug,eval')
    .option('--target-space <name>', 'where question cards are shown', 'cli')
    .option('--timeout <seconds>', 'give up after this long', '900')
    .action(async (name: string, o) => {
      const c = client(o);
      const until = Date.now() + Number(o.timeout) * 1000;
      try {
        for (;;) {
          const r = await c.createRun({
            conversationId: 'tether template warm',
            features: featuresOf(o.features, o.targetSpace),
            template: name,
          });
          await c.deleteRun(r.runId).catch(() => undefined);
          if (r.start === RunStart.TEMPLATE) {
            console.log(`${name}: ${r.startNote}`);
            break;
          }
          if (!/being made/.test(r.startNote)) throw new Error(r.startNote || `template ${name} has no warm-up`);
          if (Date.now() > until) throw new Error(`the snapshot of ${name} was not made in ${o.timeout} s`);
          await new Promise((res) => setTimeout(res, 2000));
        }
      } catch (err) {
        fail(err);
      } finally {
        c.close();
      }
    });
}
