import { status } from '@grpc/grpc-js';
import type Docker from 'dockerode';
import type { GatewayConfig } from '../config';
import { GatewayError } from '../errors';
import { TEMPLATE_LABELS, templateRepository } from '../templates/naming';
import { resolveImage } from './image';
import type { TemplateImage, TemplateImageSource } from './templateImages';

/**
 * The template images a Docker engine holds, found by the labels `tether template build` puts
 * on them: the newest one built on the current runner image is a template's image.
 */
export class DockerTemplateImages implements TemplateImageSource {
  constructor(
    private readonly config: GatewayConfig,
    private readonly docker: Docker,
  ) {}

  async imageOf(name: string): Promise<string> {
    const base = resolveImage(this.config);
    const built = await this.list(name);
    const current = built.filter((t) => t.base === base);
    if (current.length) return current[0].image;
    if (built.length) {
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `template ${name} was built on ${built[0].base}, not on the current runner image ${base}: rebuild it (tether template build ${name} DIR)`,
      );
    }
    throw new GatewayError(
      status.FAILED_PRECONDITION,
      `template ${name} is allowed but not built on this engine: tether template build ${name} DIR`,
    );
  }

  async list(name?: string): Promise<TemplateImage[]> {
    const label = name ? `${TEMPLATE_LABELS.name}=${name}` : TEMPLATE_LABELS.name;
    const images = await this.docker.listImages({ filters: JSON.stringify({ label: [label] }) });
    return images
      .map((i) => ({
        name: i.Labels?.[TEMPLATE_LABELS.name] ?? '',
        image:
          (i.RepoTags ?? []).find((t) =>
            t.startsWith(`${templateRepository(i.Labels?.[TEMPLATE_LABELS.name] ?? '')}:`),
          ) ?? i.Id,
        base: i.Labels?.[TEMPLATE_LABELS.base] ?? '',
        created: new Date(i.Created * 1000),
        ...(i.Labels?.[TEMPLATE_LABELS.warmup] ? { warmup: i.Labels[TEMPLATE_LABELS.warmup] } : {}),
      }))
      .sort((a, b) => b.created.getTime() - a.created.getTime());
  }
}
