// What the Docker engine tests share about isolation: a bridge and chain prefix of this test
// process (`rca` + the pid in base 36: tests of several processes never touch each other's rules),
// the removal of the containers, networks and firewall chains a test agent made, and raw Engine
// API calls.
import { Client } from 'undici';
import { removeIsolationFirewall } from '../../agent/firewall.js';
import { DOCKER_SOCKET } from '../helpers.js';

/** 3 to 6 characters: bridges `<prefix>-<hash>` stay within the kernel's 15. */
export const TEST_NET_PREFIX = `rca${(process.pid % 46_656).toString(36)}`;

/** The docker settings every engine test agent gets: its own prefix, the default pool and firewall. */
export const testIsolation = { firewall: 'on' as const, pool: '10.231.0.0/16', prefix: TEST_NET_PREFIX, blocked: [] };

/** A raw Engine API call (for what the tests check, or clean up, behind the agent's back). */
export async function engine(method: 'GET' | 'POST' | 'DELETE', path: string, body?: unknown): Promise<{ status: number; json: any }> {
  const client = new Client('http://localhost', { socketPath: DOCKER_SOCKET });
  try {
    const res = await client.request({
      method,
      path: `/v1.41${path}`,
      body: body === undefined ? undefined : JSON.stringify(body),
      headers: body === undefined ? {} : { 'content-type': 'application/json' },
    });
    const text = await res.body.text();
    return { status: res.statusCode, json: text ? JSON.parse(text) : undefined };
  } finally {
    await client.close();
  }
}

const byAgent = (agentId: string) => encodeURIComponent(JSON.stringify({ label: [`rc.agent-id=${agentId}`] }));

/** Removes every container labelled with a test agent's id, then its instance networks. */
export async function removeAgentContainers(agentId: string): Promise<void> {
  const { json } = await engine('GET', `/containers/json?all=true&filters=${byAgent(agentId)}`);
  for (const c of (json ?? []) as { Id: string }[]) await engine('DELETE', `/containers/${c.Id}?force=true`);
  await removeAgentNetworks(agentId);
}

/** Removes the networks labelled with the agent's id (after its containers are gone). */
export async function removeAgentNetworks(agentId: string): Promise<void> {
  const { json } = await engine('GET', `/networks?filters=${byAgent(agentId)}`);
  for (const n of (json ?? []) as { Id: string }[]) await engine('DELETE', `/networks/${n.Id}`);
}

/** Removes this process's chains and jumps (call once every agent of the file is closed). */
export const removeTestFirewall = () => removeIsolationFirewall(TEST_NET_PREFIX);
