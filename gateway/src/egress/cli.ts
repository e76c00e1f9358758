import type { Command } from 'commander';
import { adminConfig } from '../sandbox/adminConfig';
import { loggedTenants, readEgressLog } from './log';
import { egressLogDir } from './service';

/** `tether egress-log [RUN]`: the proxy's records, read from the gateway's state dir. */
export function registerEgressCommands(program: Command, fail: (err: unknown) => never): void {
  program
    .command('egress-log [runId]')
    .description(
      "print the egress proxy's records (JSON lines: host, port, bytes, allowed or refused), of one run or of a tenant",
    )
    .option('--config <file>', 'JSON config file (or TETHER_CONFIG), for stateDir')
    .option('--tenant <name>', 'only this tenant (default: every tenant with a log)')
    .action(async (runId: string | undefined, o: { config?: string; tenant?: string }) => {
      try {
        const dir = egressLogDir(adminConfig(o.config));
        const tenants = o.tenant ? [o.tenant] : await loggedTenants(dir);
        for (const tenant of tenants)
          for (const r of await readEgressLog(dir, tenant, runId)) console.log(JSON.stringify(r));
      } catch (err) {
        fail(err);
      }
    });
}
