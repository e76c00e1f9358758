import type * as k8s from '@kubernetes/client-node';

/** What every request to the API server shares: its errors' status and message, and the merge-patch header. */

/** The HTTP status of a failed request to the API server (the client library puts it in one of two places). */
export const statusOf = (err: unknown): number | undefined =>
  (err as { statusCode?: number }).statusCode ?? (err as { response?: { statusCode?: number } }).response?.statusCode;

/** The API server's own words for a failed request, else the error's. */
export const bodyMessage = (err: unknown): string =>
  (err as { body?: { message?: string } }).body?.message ?? (err as Error).message ?? String(err);

/** Request options for a JSON merge patch (the client library sends a JSON patch otherwise). */
export const MERGE_PATCH = { headers: { 'Content-Type': 'application/merge-patch+json' } };

/** A JSON merge patch of one pod's metadata (labels, annotations; a resourceVersion makes it conditional). */
export async function mergePatchPodMetadata(
  core: k8s.CoreV1Api,
  ns: string,
  name: string,
  metadata: Record<string, unknown>,
): Promise<void> {
  await core.patchNamespacedPod(
    name,
    ns,
    { metadata },
    undefined,
    undefined,
    undefined,
    undefined,
    undefined,
    MERGE_PATCH,
  );
}
