import type { GatewayConfig } from '../config';
import { logger } from '../log';
import type { SandboxProvider } from './provider';
import { ProcessProvider } from './process';
import { refuseDisallowedProvider } from './allowed';

/** The provider `config.provider` names: the one place that knows the providers by name. */
export async function createProvider(config: GatewayConfig): Promise<SandboxProvider> {
  if (config.provider === 'process') {
    refuseDisallowedProvider(config);
    logger.warn('using the process provider: tools run WITHOUT isolation (development only)');
    return new ProcessProvider(config.stateDir, config.fastPath);
  }
  if (config.provider === 'kubernetes') {
    const { KubernetesProvider } = await import('./kubernetes/KubernetesProvider');
    return new KubernetesProvider(config);
  }
  const { DockerProvider } = await import('./docker');
  return new DockerProvider(config);
}
