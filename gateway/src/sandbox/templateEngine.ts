import Docker from 'dockerode';
import type { GatewayConfig } from '../config';
import { DockerTemplateBuilder } from './dockerTemplateBuilder';
import { DockerTemplateImages } from './dockerTemplateImages';
import type { TemplateImageBuilder, TemplateImageSource } from './templateImages';

// `tether template build|list` work with a Docker engine, whichever provider runs the
// templates: the kubernetes provider's nodes are given the images from there, by a registry
// or by loading them.

/** What `tether template build` builds with: the docker CLI, on the engine it is set up for. */
export function templateBuilder(): TemplateImageBuilder {
  return new DockerTemplateBuilder();
}

/** Where `tether template list` finds the built templates: the engine on `docker.socketPath`. */
export function builtTemplateImages(config: GatewayConfig): TemplateImageSource {
  return new DockerTemplateImages(config, new Docker({ socketPath: config.docker.socketPath }));
}
