/**
 * The providers a config may name (`provider`). The list is the sandbox layer's: the config
 * schema takes it from here, so adding a provider touches no module outside `sandbox/`.
 */
export const PROVIDERS = ['docker', 'process', 'kubernetes'] as const;

export type ProviderName = (typeof PROVIDERS)[number];

/** The provider of a config that names none: the one that isolates runs on a single host. */
export const DEFAULT_PROVIDER: ProviderName = 'docker';
