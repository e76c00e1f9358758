import { Type, type SchemaOptions, type TUnsafe } from '@sinclair/typebox';

/**
 * A string out of a fixed list, written as JSON Schema `enum` (what models read best) rather
 * than TypeBox's `anyOf` of literals; the static type is the union of the listed strings.
 */
export function StringEnum<const T extends readonly string[]>(
  values: T,
  options: SchemaOptions = {},
): TUnsafe<T[number]> {
  return Type.Unsafe<T[number]>({ ...options, enum: [...values] });
}
