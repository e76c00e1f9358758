import type { Check } from '../checks';
import type { GatewayConfig } from '../config';
import type { ProviderName } from './names';

/** The process provider has nothing to check: it only warns that it isolates nothing. */
async function diagnoseProcess(): Promise<Check[]> {
  return [
    {
      name: 'provider',
      status: 'warn',
      detail: 'process: tools run as local child processes WITHOUT any isolation',
      fix: 'use the docker provider (the default) for anything but development',
    },
  ];
}

/**
 * Each provider's checks for `tether doctor`, by the name the config gives. Each is loaded
 * only when asked for, so checking one provider loads no other provider's client library.
 */
const DOCTORS: Record<ProviderName, (config: GatewayConfig) => Promise<Check[]>> = {
  docker: async (config) => (await import('./dockerDoctor')).diagnoseDocker(config),
  process: diagnoseProcess,
  kubernetes: async (config) => (await import('./kubernetes/doctor')).diagnoseKubernetes(config),
};

/** The checks of the provider the config names, starting with a line naming it. */
export function providerChecks(config: GatewayConfig): Promise<Check[]> {
  return DOCTORS[config.provider](config);
}
