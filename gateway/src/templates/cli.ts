import type { Command } from 'commander';
import { adminConfig } from '../sandbox/adminConfig';
import { resolveImage } from '../sandbox/image';
import { builtTemplateImages, templateBuilder } from '../sandbox/templateEngine';
import { buildTemplate } from './build';
import { TemplateCatalog } from './catalog';
import { listPacks, loadPack, packsDir } from './packs/manifest';

/** `tether template build|packs|list`; returns the `template` command, for the client's `template warm`. */
export function registerTemplateCommands(program: Command, fail: (err: unknown) => never): Command {
  const template = program.command('template').description('runner templates: images derived from the runner image');
  template
    .command('build <name> [dir]')
    .description(
      'build a template from DIR/Dockerfile (a fragment, or a full Dockerfile FROM $TETHER_IMAGE) and any language packs; tagged by content hash',
    )
    .option('--config <file>', 'JSON config file (or TETHER_CONFIG), for docker.image')
    .option('--base <image>', 'the runner image to build on (default: docker.image, else the one setup.sh built)')
    .option('--pack <name>', 'add a language pack (repeatable; `tether template packs` lists them)', collect, [])
    .action(async (name: string, dir: string | undefined, o: { config?: string; base?: string; pack: string[] }) => {
      try {
        const base = o.base ?? resolveImage(adminConfig(o.config));
        if (!base) throw new Error('no runner image: run scripts/setup.sh, or pass --base');
        const r = await buildTemplate({ name, dir, packs: o.pack, baseImage: base, builder: templateBuilder() });
        console.log(r.tag);
      } catch (err) {
        fail(err);
      }
    });
  template
    .command('packs')
    .description('list the language packs a template can be built with')
    .action(() => {
      try {
        for (const name of listPacks()) console.log(`${name}\t${loadPack(name).manifest.description}`);
        if (listPacks().length === 0) console.error(`no packs in ${packsDir()}`);
      } catch (err) {
        fail(err);
      }
    });
  template
    .command('list')
    .description('list the built templates, newest first, and the runner image each was built on')
    .option('--config <file>', 'JSON config file (or TETHER_CONFIG)')
    .action(async (o: { config?: string }) => {
      try {
        const config = adminConfig(o.config);
        const current = resolveImage(config);
        const all = await new TemplateCatalog(config, builtTemplateImages(config)).list();
        for (const t of all)
          console.log(
            `${t.name}\t${t.image}\t${t.created.toISOString()}\t${t.base === current ? 'current' : `stale (built on ${t.base})`}`,
          );
      } catch (err) {
        fail(err);
      }
    });
  return template;
}

function collect(value: string, previous: string[]): string[] {
  return [...previous, value];
}
