import type { MachineSpec } from '../store/metadata/types.js';

/** `spec` with `changes` merged into its extensions (an undefined value drops that one). */
export function withExtensions(spec: MachineSpec, changes: Record<string, unknown>): MachineSpec {
  const extensions = { ...spec.extensions, ...changes };
  for (const [k, v] of Object.entries(extensions)) if (v === undefined) delete extensions[k];
  const { extensions: _old, ...rest } = spec;
  return Object.keys(extensions).length ? { ...rest, extensions } : rest;
}
