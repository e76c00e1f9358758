import type Docker from 'dockerode';
import { status } from '@grpc/grpc-js';
import type { GatewayConfig } from '../config';
import { GatewayError, invalid } from '../errors';
import { resolveImage } from '../sandbox/image';

/**
 * Labels `tether template build` puts on a template image. The engine keeps them, so the
 * catalog needs no file of its own: it survives restarts and works the same for a gateway
 * running in a container, as long as it talks to the same engine.
 */
export const TEMPLATE_LABELS = {
  name: 'dev.tether.template',
  /** The runner image the template was built on (its tag). */
  base: 'dev.tether.template.base',
  /** Hash of the template's build context, its Dockerfile and the base image. */
  inputs: 'dev.tether.inputs',
} as const;

export const TEMPLATE_NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
/** The name of the runner image itself, always allowed. */
export const BASE_TEMPLATE = 'base';

export const templateRepository = (name: string) => `tether-template-${name}`;

/** The templates a tenant may name: its own plus those under `*`, with the base first. */
export function allowedTemplates(config: GatewayConfig, tenant: string): string[] {
  const allowed = config.templates.allowed;
  return [...new Set([BASE_TEMPLATE, ...(allowed['*'] ?? []), ...(allowed[tenant] ?? [])])];
}

export interface TemplateImage {
  name: string;
  image: string;
  base: string;
  created: Date;
}

/** Finds the image of a template: the newest one built on the current runner image. */
export class TemplateCatalog {
  constructor(
    private readonly config: GatewayConfig,
    private readonly docker: Docker | undefined,
  ) {}

  /**
   * The image a run of this tenant starts from; undefined for the base runner image. A name
   * the tenant may not use is INVALID_ARGUMENT (unknown and not allowed look the same, so
   * a tenant learns nothing of other tenants' templates); an allowed one that is not built
   * for the current runner image is FAILED_PRECONDITION.
   */
  async imageFor(tenant: string, name: string): Promise<string | undefined> {
    if (!name || name === BASE_TEMPLATE) return undefined;
    const allowed = allowedTemplates(this.config, tenant);
    if (!allowed.includes(name))
      throw invalid(
        `template ${JSON.stringify(name.slice(0, 64))} is not available to this tenant; allowed templates: ${allowed.join(', ')}`,
      );
    return this.imageOf(name);
  }

  /** The image of a template built on the current runner image, whoever asks (the pool). */
  async imageOf(name: string): Promise<string> {
    // Without an engine (the kubernetes provider) a template's image is the one the config names for the nodes.
    if (!this.docker && this.config.provider === 'kubernetes') {
      const ref = this.config.kubernetes.templates[name];
      if (ref) return ref;
      throw new GatewayError(
        status.FAILED_PRECONDITION,
        `template ${name} is allowed but has no image for the kubernetes provider: set kubernetes.templates.${name} to its image as the nodes know it`,
      );
    }
    if (!this.docker)
      throw new GatewayError(status.FAILED_PRECONDITION, 'templates need the docker or the kubernetes provider');
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

  /** The built images of one template (or all), newest first. */
  async list(name?: string): Promise<TemplateImage[]> {
    if (!this.docker) return [];
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
      }))
      .sort((a, b) => b.created.getTime() - a.created.getTime());
  }
}
