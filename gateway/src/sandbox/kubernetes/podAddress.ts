import type { V1Pod } from '@kubernetes/client-node';
import { isIP } from 'node:net';

/**
 * Whether another pod could reach this one at `ip`. A loopback-only CNI still reports an
 * address: its `loopback` plugin's 127.0.0.1 and ::1, which from a replica are the replica itself.
 */
function reachable(ip: string): boolean {
  const family = isIP(ip);
  if (family === 4) return !/^(127\.|0\.0\.0\.0$)/.test(ip);
  if (family === 6) return !/^(::1?$|::ffff:127\.|fe[89ab][0-9a-f]:)/i.test(ip);
  return false;
}

/** Every address the pod's status reports: the primary `podIP`, then `podIPs`. */
function reported(pod: V1Pod): string[] {
  const all = [pod.status?.podIP, ...(pod.status?.podIPs ?? []).map((p) => p.ip)];
  return [...new Set(all.filter((ip): ip is string => typeof ip === 'string' && ip !== ''))];
}

/**
 * The pod's own address, where a replica reaches its runner over TCP: the first reported one
 * that another pod could reach. A pod on a network that gives it none has none.
 */
export function podAddress(pod: V1Pod): string | undefined {
  return reported(pod).find(reachable);
}

/**
 * Where the runner listens: the pod's address when the pod has one by the time it boots,
 * else every address of the pod's own network namespace (one reported later is served too).
 */
export function listenHost(address: string | undefined): string {
  return address ?? '0.0.0.0';
}

/** Why a pod cannot be reached over TCP, in words an operator can act on. */
export function noAddressReason(pod: V1Pod): string {
  const ips = reported(pod);
  const what = ips.length
    ? `its status reports only ${ips.join(', ')}, which no other pod can reach`
    : 'status.podIP is empty';
  return `pod ${pod.metadata?.name ?? ''} has no address (${what}: the cluster's pod network gave it none); kubernetes.transport 'tcp' needs pods with an address, use 'exec' on this cluster`;
}
