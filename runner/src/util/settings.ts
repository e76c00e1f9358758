import type { Static, TSchema } from '@sinclair/typebox';
import { Value } from '@sinclair/typebox/value';
import type { RunContext } from '../run';

/**
 * A family's settings from the gateway's config key `runner.<key>`, checked against its schema
 * (every problem said); a bad server config fails the run's start with the reason. TypeBox's
 * own check rather than a JSON Schema compiler: compiling one costs every runner's start tens of
 * milliseconds, for an object of a few keys.
 */
export function checkedSettings<S extends TSchema>(run: RunContext, key: string, schema: S): Static<S> {
  const given = run.settingsFor<object>(key, {});
  if (!Value.Check(schema, given)) {
    const why = [...Value.Errors(schema, given)].map((e) => `${e.path || '/'} ${e.message}`).join('; ');
    throw new Error(`invalid server config runner.${key}: ${why}`);
  }
  return given as Static<S>;
}
