import * as k8s from '@kubernetes/client-node';
import type { GatewayConfig } from '../../config';
import type { Check } from '../../checks';
import { resolveImage } from '../image';
import { loadKubeConfig } from './KubernetesProvider';

/** What the gateway does in the runs namespace, as (resource, subresource, verb[, API group]). */
type Need = [string, string, string, string?];
const NEEDED: Need[] = [
  ['pods', '', 'create'],
  ['pods', '', 'get'],
  ['pods', '', 'list'],
  ['pods', '', 'watch'],
  ['pods', '', 'delete'],
  // Marks a booted pod, and claims a pooled one (a patch guarded by its resourceVersion).
  ['pods', '', 'patch'],
  ['pods', 'exec', 'create'],
  ['pods', 'attach', 'create'],
  ['events', '', 'list'],
];

/** What the shared warm pool adds: the Lease that says which replica fills it. */
const NEEDED_FOR_POOL: Need[] = [
  ['leases', '', 'get', 'coordination.k8s.io'],
  ['leases', '', 'create', 'coordination.k8s.io'],
  ['leases', '', 'update', 'coordination.k8s.io'],
];

/** What a claimed workspace adds (`kubernetes.workspace.storageClassName`). */
const NEEDED_FOR_CLAIMS: Need[] = [
  ['persistentvolumeclaims', '', 'create'],
  ['persistentvolumeclaims', '', 'get'],
  ['persistentvolumeclaims', '', 'list'],
  ['persistentvolumeclaims', '', 'delete'],
  ['persistentvolumeclaims', '', 'patch'],
];

/** What runs from agent-sandbox add (`kubernetes.agentSandbox`): its template, warm pool and claims. */
const AGENT_SANDBOX = 'extensions.agents.x-k8s.io';
const NEEDED_FOR_AGENT_SANDBOX: Need[] = [
  ...(['get', 'create', 'patch'] as const).flatMap((verb): Need[] => [
    ['sandboxtemplates', '', verb, AGENT_SANDBOX],
    ['sandboxwarmpools', '', verb, AGENT_SANDBOX],
  ]),
  ...(['get', 'list', 'create', 'delete'] as const).map((verb): Need => ['sandboxclaims', '', verb, AGENT_SANDBOX]),
];

const message = (err: unknown) =>
  (err as { body?: { message?: string } }).body?.message ?? (err as Error).message ?? String(err);

/**
 * The kubernetes provider's checks: the API server answers, this identity may do what the
 * provider does in the runs namespace (SelfSubjectAccessReview), and the runner image is on
 * the nodes (their status lists the images they hold; pods never pull one the nodes lack
 * when no registry is reachable).
 */
export async function diagnoseKubernetes(config: GatewayConfig): Promise<Check[]> {
  const checks: Check[] = [{ name: 'provider', status: 'ok', detail: 'kubernetes' }];
  const ns = config.kubernetes.namespace;
  let kc: k8s.KubeConfig;
  try {
    kc = loadKubeConfig(config.kubernetes.kubeconfig);
  } catch (err) {
    checks.push({
      name: 'cluster',
      status: 'fail',
      detail: message(err),
      fix: 'set kubernetes.kubeconfig (KUBECONFIG), or run the gateway in the cluster with its ServiceAccount',
    });
    return checks;
  }
  const server = kc.getCurrentCluster()?.server ?? '?';
  try {
    const { body } = await kc.makeApiClient(k8s.VersionApi).getCode();
    checks.push({ name: 'cluster', status: 'ok', detail: `Kubernetes ${body.gitVersion} at ${server}` });
  } catch (err) {
    checks.push({
      name: 'cluster',
      status: 'fail',
      detail: `the API server at ${server} does not answer: ${message(err)}`,
      fix: 'check the kubeconfig, the network path to the API server and its certificate',
    });
    return checks;
  }

  const authz = kc.makeApiClient(k8s.AuthorizationV1Api);
  const missing: string[] = [];
  const claims = !!config.kubernetes.workspace.storageClassName;
  const { size, templates, maxTotal } = config.pool;
  const pool = maxTotal > 0 && (size > 0 || Object.values(templates).some((n) => n > 0));
  const agentSandbox = config.kubernetes.agentSandbox;
  const needs = [
    ...NEEDED,
    ...(claims ? NEEDED_FOR_CLAIMS : []),
    ...(pool ? NEEDED_FOR_POOL : []),
    ...(agentSandbox ? NEEDED_FOR_AGENT_SANDBOX : []),
  ];
  for (const [resource, subresource, verb, group] of needs) {
    try {
      const { body } = await authz.createSelfSubjectAccessReview({
        spec: {
          resourceAttributes: { namespace: ns, group, resource, subresource: subresource || undefined, verb },
        },
      });
      if (!body.status?.allowed) missing.push(`${verb} ${resource}${subresource ? `/${subresource}` : ''}`);
    } catch (err) {
      missing.push(`${verb} ${resource}${subresource ? `/${subresource}` : ''} (${message(err)})`);
    }
  }
  checks.push(
    missing.length
      ? {
          name: 'rbac',
          status: 'fail',
          detail: `not allowed in namespace ${ns}: ${missing.join(', ')}`,
          fix: `apply deploy/kubernetes/10-rbac.yaml${agentSandbox ? ' and deploy/kubernetes/optional/agent-sandbox-rbac.yaml' : ''} (with the namespace the config names)`,
        }
      : {
          name: 'rbac',
          status: 'ok',
          detail: `pods, pods/exec, pods/attach${claims ? ', persistentvolumeclaims' : ''}${pool ? ', leases' : ''}${agentSandbox ? ', agent-sandbox templates, warm pools and claims' : ''} and events in namespace ${ns}`,
        },
  );

  const image = config.kubernetes.image || resolveImage(config);
  if (!image) {
    checks.push({ name: 'image', status: 'fail', detail: 'no runner image configured', fix: 'set kubernetes.image' });
    return checks;
  }
  try {
    const { body } = await kc.makeApiClient(k8s.CoreV1Api).listNode();
    const names = (n: k8s.V1Node) => (n.status?.images ?? []).flatMap((i) => i.names ?? []);
    const has = (n: k8s.V1Node) => names(n).some((x) => sameImage(x, image));
    const holding = body.items.filter(has).map((n) => n.metadata?.name ?? '?');
    const lacking = body.items.filter((n) => !has(n)).map((n) => n.metadata?.name ?? '?');
    checks.push(
      holding.length === 0
        ? {
            name: 'image',
            status: 'fail',
            detail: `no node holds ${image} (${body.items.length} node(s) listed)`,
            fix: 'push the runner image where the nodes can pull it, or import it into each node (scripts/cluster.sh load-image for the test cluster)',
          }
        : {
            name: 'image',
            status: lacking.length ? 'warn' : 'ok',
            detail: `${image} on ${holding.join(', ')}${lacking.length ? `; not on ${lacking.join(', ')} (runs placed there pull it, or fail without a registry)` : ''}`,
          },
    );
  } catch (err) {
    // Reading nodes is cluster-wide: a least-privilege gateway may not; say so and go on.
    checks.push({
      name: 'image',
      status: 'warn',
      detail: `could not read the nodes' images: ${message(err)}`,
      fix: 'check with an identity that may list nodes: `tether doctor` with an admin kubeconfig',
    });
  }
  return checks;
}

/** Whether a node's image name is the configured one (`docker.io/library/x:t` is `x:t`). */
export function sameImage(nodeName: string, image: string): boolean {
  const short = (n: string) => n.replace(/^docker\.io\/(library\/)?/, '');
  return short(nodeName) === short(image);
}
