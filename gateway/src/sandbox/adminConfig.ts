import { defaultConfig, loadConfig, type GatewayConfig } from '../config';

/** The config for admin commands that need no tokens (they talk to the engine, not to a gateway). */
export function adminConfig(file?: string): GatewayConfig {
  if (!file && !process.env.TETHER_CONFIG) {
    const config = defaultConfig();
    return {
      ...config,
      docker: {
        ...config.docker,
        image: process.env.TETHER_IMAGE ?? '',
        socketPath: process.env.DOCKER_SOCKET ?? config.docker.socketPath,
      },
    };
  }
  return loadConfig({ file, overrides: { tokens: { admin: 'admin' } } });
}
