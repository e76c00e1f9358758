import * as path from 'node:path';
import type { AdapterCommand, AdapterSpec } from './adapters';
import { findMarkerUp, findMarkersDown, type MarkerHit } from '../../util/rootMarkers';

/** One adapter row, decided now: root marker AND binary. */
export interface Availability {
  id: string;
  command: string;
  /** The debug.d file that declared it. */
  source?: string;
  markers: readonly string[];
  available: boolean;
  /** Where the marker was found: the project root the adapter runs in. */
  root?: MarkerHit;
  markerMissing?: string;
  binary?: AdapterCommand;
  binaryMissing?: string;
}

async function decide(
  spec: AdapterSpec,
  workspaceRoot: string,
  root: MarkerHit | undefined,
  markerMissing: string,
): Promise<Availability> {
  const binary = await spec.findBinary(root?.dir ?? workspaceRoot, workspaceRoot);
  return {
    id: spec.id,
    command: spec.command,
    source: spec.source,
    markers: spec.markers,
    available: !!root && binary.ok,
    root,
    markerMissing: root ? undefined : markerMissing,
    binary: binary.ok ? binary.command : undefined,
    binaryMissing: binary.ok ? undefined : binary.missing,
  };
}

/** Every adapter row for the workspace as a whole (markers at its root or a couple of levels down). */
export async function workspaceAdapters(workspaceRoot: string, specs: AdapterSpec[]): Promise<Availability[]> {
  return Promise.all(
    specs.map(async (spec) => {
      const hits = await findMarkersDown(workspaceRoot, spec.markers);
      return decide(spec, workspaceRoot, hits[0], `none of ${spec.markers.join(', ')} in the workspace`);
    }),
  );
}

/** One adapter for one program: the nearest marker from the program's folder up to the workspace root. */
export async function adapterForFile(
  spec: AdapterSpec,
  workspaceRoot: string,
  programDir: string,
): Promise<Availability> {
  const hit = await findMarkerUp(workspaceRoot, programDir, spec.markers);
  const rel = path.relative(workspaceRoot, programDir) || '.';
  return decide(
    spec,
    workspaceRoot,
    hit,
    `none of ${spec.markers.join(', ')} in ${rel} or any folder above it up to the workspace root`,
  );
}

/** "binary missing: dlv not on PATH; root marker missing: none of go.mod …" */
export function whyUnavailable(a: Availability): string {
  const parts: string[] = [];
  if (a.binaryMissing) parts.push(`binary missing: ${a.binaryMissing}`);
  if (a.markerMissing) parts.push(`root marker missing: ${a.markerMissing}`);
  return parts.join('; ');
}
