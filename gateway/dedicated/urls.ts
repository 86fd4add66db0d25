// The URL forms of dedicated endpoints on the gateway: `/dedicated/<instance id>/<port>/<path>`
// and `/instances/<instance id>/<path>` (the instance's main routed port).

export const DEDICATED_PREFIX = '/dedicated/';
export const INSTANCE_PREFIX = '/instances/';

export interface DedicatedTarget {
  instanceId: string;
  /** Routed port; undefined: the instance's main port. */
  port: number | undefined;
  /** Path on the backend (without query). */
  path: string;
}

/** A parsed `/dedicated/<id>/<port>/<path>` URL, or undefined when it is not one. */
export function parseDedicatedUrl(url: string): DedicatedTarget | undefined {
  if (!url.startsWith(DEDICATED_PREFIX)) return undefined;
  const idEnd = url.indexOf('/', DEDICATED_PREFIX.length);
  if (idEnd < 0) return undefined;
  const portEnd = url.indexOf('/', idEnd + 1);
  const portText = url.slice(idEnd + 1, portEnd < 0 ? undefined : portEnd);
  if (!/^[1-9][0-9]{0,4}$/.test(portText)) return undefined;
  const port = Number(portText);
  if (port > 65535) return undefined;
  const instanceId = url.slice(DEDICATED_PREFIX.length, idEnd);
  if (instanceId === '') return undefined;
  return { instanceId, port, path: portEnd < 0 ? '/' : url.slice(portEnd) };
}

/** A parsed `/instances/<id>/<path>` URL (the main port), or undefined when it is not one. */
export function parseInstanceUrl(url: string): DedicatedTarget | undefined {
  if (!url.startsWith(INSTANCE_PREFIX)) return undefined;
  const idEnd = url.indexOf('/', INSTANCE_PREFIX.length);
  const instanceId = url.slice(INSTANCE_PREFIX.length, idEnd < 0 ? undefined : idEnd);
  if (instanceId === '') return undefined;
  return { instanceId, port: undefined, path: idEnd < 0 ? '/' : url.slice(idEnd) };
}

/** /v1/messages and its sub-paths (count_tokens), with or without the /api prefix. */
export function isMessagesPath(path: string): boolean {
  const p = path.startsWith('/api/') ? path.slice(4) : path;
  return p === '/v1/messages' || p.startsWith('/v1/messages/') || p === '/v1/messages/';
}
