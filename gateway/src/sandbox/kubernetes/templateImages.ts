import { status } from '@grpc/grpc-js';
import { GatewayError } from '../../errors';
import type { TemplateImage, TemplateImageSource } from '../templateImages';

/**
 * Template images as the nodes know them: the config names each (`kubernetes.templates`), as
 * it names the runner image, since the gateway talks to no engine it could ask.
 */
export class KubernetesTemplateImages implements TemplateImageSource {
  constructor(private readonly images: Record<string, string>) {}

  async imageOf(name: string): Promise<string> {
    const ref = this.images[name];
    if (ref) return ref;
    throw new GatewayError(
      status.FAILED_PRECONDITION,
      `template ${name} is allowed but has no image for the kubernetes provider: set kubernetes.templates.${name} to its image as the nodes know it`,
    );
  }

  /** The nodes' images are not the gateway's to list. */
  async list(): Promise<TemplateImage[]> {
    return [];
  }
}
