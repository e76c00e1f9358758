/** One built image of a template. */
export interface TemplateImage {
  name: string;
  image: string;
  /** The runner image it was built on. */
  base: string;
  created: Date;
  /** Its warm-up as `tether template build` labelled it (JSON), when it has one. */
  warmup?: string;
}

/**
 * Where a provider's sandboxes find the image of a template (`capabilities.templateImages`):
 * an engine that holds the images `tether template build` made, or the images a deployment
 * names for its nodes. A provider without one runs no templates.
 */
export interface TemplateImageSource {
  /**
   * The image of a template built on the current runner image. None is a GatewayError
   * FAILED_PRECONDITION that says what to do.
   */
  imageOf(name: string): Promise<string>;
  /** The built images of one template (or all), newest first; none where the gateway cannot see them. */
  list(name?: string): Promise<TemplateImage[]>;
}

/** One image build: a Dockerfile with its context folder, build arguments and labels. */
export interface TemplateImageBuild {
  name: string;
  dir: string;
  dockerfile: string;
  buildArgs: Record<string, string>;
  labels: Record<string, string>;
  tag: string;
}

/** What `tether template build` needs of an engine; what goes into a template is decided above it. */
export interface TemplateImageBuilder {
  /** The image's id, undefined when the engine has no image of that reference. */
  imageId(ref: string): Promise<string | undefined>;
  /** The image's entrypoint (null when it has none); an image that is not there is an error. */
  entrypoint(ref: string): Promise<string[] | null>;
  /** Builds and tags the image, writing the build's progress to `progress`. */
  build(build: TemplateImageBuild, progress: NodeJS.WritableStream): Promise<void>;
  remove(ref: string): Promise<void>;
}

/** Why a gateway whose provider has no template images refuses a template. */
export const NO_TEMPLATE_IMAGES = 'templates need the docker or the kubernetes provider';
