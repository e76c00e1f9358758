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
  /** The template's warm-up (its `warmup.json`, checked), when it has one. */
  warmup: 'dev.tether.template.warmup',
} as const;

export const TEMPLATE_NAME = /^[a-z0-9][a-z0-9_.-]{0,62}$/;
/** The name of the runner image itself, always allowed. */
export const BASE_TEMPLATE = 'base';

export const templateRepository = (name: string) => `tether-template-${name}`;

/**
 * The gateway's own tenant, whose runs are template snapshots (gateway/src/warmStarts/): no token
 * may name it, and it may start from every template.
 */
export const SNAPSHOT_TENANT = 'tether:template-snapshots';
