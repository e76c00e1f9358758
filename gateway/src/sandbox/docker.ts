import type { GatewayConfig } from '../config';
import type { Sandbox, SandboxInfo, SandboxProvider, SandboxSpec } from './provider';

export class DockerProvider implements SandboxProvider {
  readonly name = 'docker';
  constructor(_config: GatewayConfig) {}
  create(_spec: SandboxSpec): Promise<Sandbox> {
    throw new Error('docker provider not implemented yet');
  }
  attach(_id: string): Promise<Sandbox> {
    throw new Error('docker provider not implemented yet');
  }
  async stop(): Promise<void> {}
  async remove(): Promise<void> {}
  async list(): Promise<SandboxInfo[]> {
    return [];
  }
  async close(): Promise<void> {}
}
