import { Command, Option } from 'commander';
import { AgentKind, RunState, SurfaceMode, Tier } from '../../gen/tether/v1/gateway_pb';
import { TetherClient } from '../../clients/typescript/src';
import type { ToolResult } from '../../gen/tether/v1/gateway_pb';
import { loadConfig } from './config';
import { startGateway } from './server';
import { diagnose, formatReport, type Check } from './doctor';
import { registerTemplateCommands } from './templates/cli';
import { registerEgressCommands } from './egress/cli';
import { summarizeMetrics } from './observability/metricsSummary';

const program = new Command();
program.name('tether').description('A gRPC gateway of tools bound to the live resources of one agent run.');

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

function fail(err: unknown): never {
  const e = err as { details?: string; message?: string; code?: number };
  console.error(`error: ${e.details ?? e.message ?? String(err)}`);
  process.exit(1);
}

const surfaceOf = (o: { plan?: boolean; readOnly?: boolean }) => ({
  mode: o.plan ? SurfaceMode.PLAN : SurfaceMode.DEFAULT,
  agent: o.readOnly ? AgentKind.READ_ONLY_SUBAGENT : AgentKind.MAIN,
});

program
  .command('serve')
  .description('start the gateway')
  .option('--config <file>', 'JSON config file (or TETHER_CONFIG)')
  .option('--listen <host:port>', 'address to listen on')
  .option('--provider <name>', 'sandbox provider: docker or process')
  .action(async (o: { config?: string; listen?: string; provider?: 'docker' | 'process' }) => {
    const config = loadConfig({
      file: o.config,
      overrides: { ...(o.listen ? { listen: o.listen } : {}), ...(o.provider ? { provider: o.provider } : {}) },
    });
    const gw = await startGateway(config);
    console.error(`tether listening on ${gw.address} (provider ${config.provider})`);
    let stopping = false;
    const stop = async (sig: string) => {
      if (stopping) return;
      stopping = true;
      console.error(`${sig}: shutting down`);
      await gw.close();
      process.exit(0);
    };
    process.on('SIGINT', () => void stop('SIGINT'));
    process.on('SIGTERM', () => void stop('SIGTERM'));
  });

program
  .command('doctor')
  .description('check the engine, the runtime and the runner image, and say what to do if something is missing')
  .option('--config <file>', 'JSON config file (or TETHER_CONFIG)')
  .option('--json', 'print the checks as JSON')
  .action(async (o: { config?: string; json?: boolean }) => {
    const notes: Check[] = [];
    let config;
    try {
      config = loadConfig({ file: o.config });
    } catch (err) {
      const msg = (err as Error).message;
      if (!msg.startsWith('no tokens configured')) fail(err);
      notes.push({
        name: 'tokens',
        status: 'warn',
        detail: 'none configured: `tether serve` refuses to start without them',
        fix: 'set TETHER_TOKENS=token=tenant or "tokens" in the config file',
      });
      config = loadConfig({ file: o.config, overrides: { tokens: { doctor: 'doctor' } } });
    }
    const checks = await diagnose(config, { notes });
    console.log(o.json ? JSON.stringify(checks, null, 2) : formatReport(checks));
    if (checks.some((c) => c.status === 'fail')) process.exitCode = 1;
  });

program
  .command('metrics')
  .description("print a quick summary of a gateway's /metrics (metrics.listen must be set)")
  .option('--config <file>', 'JSON config file (or TETHER_CONFIG)')
  .option('--url <url>', 'the /metrics URL (default: from metrics.listen)')
  .option('--raw', 'print the Prometheus text as served')
  .action(async (o: { config?: string; url?: string; raw?: boolean }) => {
    let url = o.url;
    if (!url) {
      const { listen } = loadConfig({ file: o.config, overrides: { tokens: { metrics: 'metrics' } } }).metrics;
      if (!listen)
        fail(new Error('metrics are off: set metrics.listen (TETHER_METRICS_LISTEN) on the gateway, or pass --url'));
      url = `http://${listen.replace(/^0\.0\.0\.0:/, '127.0.0.1:')}/metrics`;
    }
    const res = await fetch(url).catch((err: Error) =>
      fail(new Error(`cannot read ${url}: ${(err.cause as Error | undefined)?.message ?? err.message}`)),
    );
    if (!res.ok) fail(new Error(`${url} answered ${res.status}`));
    const text = await res.text();
    console.log(o.raw ? text : summarizeMetrics(text));
  });

const run = program.command('run').description('manage runs');
withConn(run.command('create'))
  .description('create a run')
  .option('--conversation <id>', 'conversation id', 'cli')
  .option('--workspace <dir>', 'host directory to use as the workspace (must be under an allowed root)')
  .option('--features <list>', 'comma list of lsp,ast,debug,eval,questions,vibe', 'lsp,ast,debug,eval')
  .option('--target-space <name>', 'where question cards are shown', 'cli')
  .option('--template <name>', 'runner template (default: the base runner image)')
  .option('--egress [hosts]', "grant egress: a comma list of host:port, or nothing for the tenant's whole allow-list")
  .action(async (o) => {
    const c = client(o);
    const f = new Set(
      String(o.features)
        .split(',')
        .map((s: string) => s.trim()),
    );
    try {
      const r = await c.createRun({
        conversationId: o.conversation,
        workspace: o.workspace ?? '',
        features: {
          lsp: f.has('lsp'),
          ast: f.has('ast'),
          debug: f.has('debug'),
          eval: f.has('eval'),
          vibe: f.has('vibe'),
          questions: { enabled: f.has('questions'), targetSpace: o.targetSpace },
        },
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

registerTemplateCommands(program, fail);
registerEgressCommands(program, fail);

program.parseAsync(process.argv).catch(fail);
