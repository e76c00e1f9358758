import { Command } from 'commander';
import { loadConfig, type ProviderName } from './config';
import { registerClientCommands, registerTemplateWarm } from './clientCommands';
import { startGateway } from './server';
import { diagnose, formatReport, type Check } from './doctor';
import { registerTemplateCommands } from './templates/cli';
import { registerEgressCommands } from './egress/cli';
import { summarizeMetrics } from './observability/metricsSummary';
import { PROVIDERS } from './sandbox/names';

const program = new Command();
program.name('tether').description('A gRPC gateway of tools bound to the live resources of one agent run.');

function fail(err: unknown): never {
  const e = err as { details?: string; message?: string; code?: number };
  console.error(`error: ${e.details ?? e.message ?? String(err)}`);
  process.exit(1);
}

program
  .command('serve')
  .description('start the gateway')
  .option('--config <file>', 'JSON config file (or TETHER_CONFIG)')
  .option('--listen <host:port>', 'address to listen on')
  .option('--http-listen <host:port>', 'address of the HTTP listener (Connect, HTTP/JSON), or off')
  .option('--provider <name>', `sandbox provider: ${PROVIDERS.join(', ')}`)
  .action(async (o: { config?: string; listen?: string; httpListen?: string; provider?: ProviderName }) => {
    const config = loadConfig({
      file: o.config,
      overrides: {
        ...(o.listen ? { listen: o.listen } : {}),
        ...(o.httpListen ? { http: { listen: o.httpListen } } : {}),
        ...(o.provider ? { provider: o.provider } : {}),
      },
    });
    const gw = await startGateway(config);
    console.error(
      `tether listening on ${gw.address} (gRPC)${gw.httpAddress ? ` and ${gw.httpAddress} (HTTP: Connect and JSON)` : ''} (provider ${config.provider})`,
    );
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

registerClientCommands(program, fail);
registerTemplateWarm(registerTemplateCommands(program, fail), fail);
registerEgressCommands(program, fail);

program.parseAsync(process.argv).catch(fail);
