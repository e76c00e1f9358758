import type * as k8s from '@kubernetes/client-node';

/**
 * The requests a replica makes to the API server, by kind: what it costs the cluster to keep
 * its picture of the runs (lists, watches) beside what the runs' own work needs (create,
 * delete, exec, attach, patch). Read by the benchmark and `usage` of the provider.
 */
export class ApiCounter {
  private readonly counts = new Map<string, number>();

  count(kind: string): void {
    this.counts.set(kind, (this.counts.get(kind) ?? 0) + 1);
  }

  /** Counts every request an API client of the library makes, by its HTTP method and what it asks for. */
  intercept(api: { addInterceptor(i: k8s.Interceptor): void }): void {
    api.addInterceptor((opts) => {
      const method = String((opts as { method?: string }).method ?? 'GET').toUpperCase();
      const uri = String((opts as { uri?: string }).uri ?? '');
      this.count(kindOf(method, uri));
    });
  }

  snapshot(): Record<string, number> {
    return Object.fromEntries([...this.counts].sort(([a], [b]) => a.localeCompare(b)));
  }

  total(): number {
    let n = 0;
    for (const v of this.counts.values()) n += v;
    return n;
  }
}

/** `list`, `get`, `create`, `patch`, `delete`, `update` from an HTTP method and path. */
function kindOf(method: string, uri: string): string {
  const path = uri.split('?')[0];
  if (method === 'GET') {
    // A collection ends in its plural (…/pods), an object in its name (…/pods/NAME).
    const parts = path.split('/').filter(Boolean);
    const collections = ['pods', 'persistentvolumeclaims', 'events', 'leases', 'namespaces'];
    return collections.includes(parts[parts.length - 1]) ? 'list' : 'get';
  }
  return { POST: 'create', PATCH: 'patch', DELETE: 'delete', PUT: 'update' }[method] ?? method.toLowerCase();
}
