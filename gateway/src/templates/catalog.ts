import { status } from '@grpc/grpc-js';
import type { GatewayConfig } from '../config';
import { GatewayError, invalid } from '../errors';
import { NO_TEMPLATE_IMAGES, type TemplateImage, type TemplateImageSource } from '../sandbox/templateImages';
import { BASE_TEMPLATE, SNAPSHOT_TENANT } from './naming';
import { parseWarmup, type Warmup } from './warmup';

export type { TemplateImage } from '../sandbox/templateImages';

/** The templates a tenant may name: its own plus those under `*`, with the base first. */
export function allowedTemplates(config: GatewayConfig, tenant: string): string[] {
  const allowed = config.templates.allowed;
  if (tenant === SNAPSHOT_TENANT) return [BASE_TEMPLATE, ...new Set(Object.values(allowed).flat())];
  return [...new Set([BASE_TEMPLATE, ...(allowed['*'] ?? []), ...(allowed[tenant] ?? [])])];
}

/**
 * Which templates a tenant may use, and their images from where the provider finds them
 * (`capabilities.templateImages`; none: the provider runs no templates).
 */
export class TemplateCatalog {
  private readonly known = new Map<string, { image: string; until: number }>();
  /** By image: a tag is the hash of what went into it, so its warm-up never changes. */
  private readonly warmups = new Map<string, Warmup | undefined>();

  /**
   * @param cacheMs how long a template's image, once found, is used without asking again: the
   * lookup is a listing of the engine's images (tens of ms on a busy engine) that every
   * CreateRun naming the template would otherwise pay, pooled or not. A template rebuilt
   * meanwhile is used by the runs created after that.
   */
  constructor(
    private readonly config: GatewayConfig,
    private readonly images: TemplateImageSource | undefined,
    private readonly cacheMs = 5000,
    private readonly now: () => number = Date.now,
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
    if (!this.images) throw new GatewayError(status.FAILED_PRECONDITION, NO_TEMPLATE_IMAGES);
    const known = this.known.get(name);
    if (known && known.until > this.now()) return known.image;
    const image = await this.images.imageOf(name);
    this.known.set(name, { image, until: this.now() + this.cacheMs });
    return image;
  }

  /**
   * The warm-up a template's image carries, if any. A label that does not parse (an image
   * labelled by hand) is an Error with the reason: the template then starts cold.
   */
  async warmupOf(name: string, image: string): Promise<Warmup | undefined> {
    if (this.warmups.has(image)) return this.warmups.get(image);
    const found = (await this.list(name)).find((t) => t.image === image);
    const warmup = found?.warmup ? parseWarmup(found.warmup, `the warm-up label of ${image}`) : undefined;
    this.warmups.set(image, warmup);
    return warmup;
  }

  /** The built images of one template (or all), newest first. */
  async list(name?: string): Promise<TemplateImage[]> {
    return this.images ? this.images.list(name) : [];
  }
}
