import type { ProviderName } from './names';

/**
 * Refuses a provider the config may not start, when the config is loaded: the process
 * provider runs tools without any isolation, so it must be enabled on purpose.
 */
export function refuseDisallowedProvider(config: { provider: ProviderName; allowProcessProvider: boolean }): void {
  if (config.provider === 'process' && !config.allowProcessProvider) {
    throw new Error(
      'the process provider runs tools without isolation; enable it explicitly with allowProcessProvider (TETHER_ALLOW_PROCESS_PROVIDER=1)',
    );
  }
}
